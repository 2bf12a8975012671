"""Explorers: a static figure for the page, and sliders for a live kernel.

The built HTML book has no kernel, and the widget manager's JavaScript comes from a CDN, so
a widget alone would leave the page blank. `explorer` therefore draws the figure once at the
default settings (that image is what the HTML shows) and then offers the same drawing
function behind ipywidgets controls for a reader running the notebook.
"""

from __future__ import annotations

import inspect

import matplotlib.pyplot as plt

KERNEL_NOTE = ("*The figure shows the default settings. The sliders below it need a running "
               "kernel: open this chapter in Binder or Colab (the rocket at the top of the page), "
               "or locally with `make lab`.*")


def _control(name: str, spec):
    """Turn a short spec into an ipywidgets control and its default value."""
    import ipywidgets as w

    if isinstance(spec, w.ValueWidget):
        return spec, spec.value
    if isinstance(spec, bool):
        return w.Checkbox(value=spec, description=name), spec
    if isinstance(spec, list):
        if not spec:
            raise ValueError(f"control {name!r}: a choice list needs at least one option")
        return w.Dropdown(options=spec, value=spec[0], description=name), spec[0]
    if isinstance(spec, tuple) and len(spec) in (4, 5):
        lo, hi, step, default = spec[:4]
        if not lo <= default <= hi:
            raise ValueError(f"control {name!r}: default {default} is outside [{lo}, {hi}]")
        style = {"description_width": "initial"}
        if len(spec) == 5:
            if spec[4] != "log":
                raise ValueError(f"control {name!r}: the fifth entry may only be 'log'")
            import math
            # FloatLogSlider takes exponents for its range and a value for its position.
            ctl = w.FloatLogSlider(value=default, min=math.log10(lo), max=math.log10(hi),
                                   step=step, description=name, style=style)
        elif all(isinstance(v, int) for v in (lo, hi, step, default)):
            ctl = w.IntSlider(value=default, min=lo, max=hi, step=step, description=name, style=style)
        else:
            ctl = w.FloatSlider(value=default, min=lo, max=hi, step=step, description=name, style=style)
        return ctl, default
    raise ValueError(f"control {name!r}: use (min, max, step, default[, 'log']), a list of "
                     f"choices, a bool, or an ipywidgets control; got {spec!r}")


def explorer(draw, **controls):
    """Show ``draw(**defaults)`` as a static figure, then return live controls for it.

    ``draw`` takes keyword arguments named like the controls and draws on a new figure
    (it may return the figure). Each control is ``(min, max, step, default)`` for a slider,
    ``(min, max, step, default, "log")`` for a log-scale slider (step in decades),
    a list of choices, a bool, or a ready ipywidgets control. Used from chapter 01 on.
    """
    from IPython.display import display
    import ipywidgets as w

    params = inspect.signature(draw).parameters
    missing = [name for name in controls if name not in params]
    if missing:
        raise ValueError(f"draw() has no parameter named {', '.join(missing)}")
    widgets, defaults = {}, {}
    for name, spec in controls.items():
        widgets[name], defaults[name] = _control(name, spec)

    fig = draw(**defaults)
    display(fig if fig is not None else plt.gcf())
    plt.close("all")
    from IPython.display import Markdown

    # The HTML page has no kernel: say so under the figure, once, the same everywhere.
    display(Markdown(KERNEL_NOTE))

    def redraw(**values):
        draw(**values)
        plt.show()

    out = w.interactive_output(redraw, widgets)
    return w.VBox([w.HBox(list(widgets.values()), layout=w.Layout(flex_flow="row wrap")), out])
