import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from dtbook import plotting, widgets


def test_figure_sets_labels_and_scales():
    fig, ax = plotting.figure("t", "x", "y", logx=True, logy=True)
    assert ax.get_title() == "t" and ax.get_xlabel() == "x" and ax.get_ylabel() == "y"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(fig)


def test_measured_vs_model_draws_both():
    fig, ax = plotting.figure()
    x = np.arange(1, 5)
    plotting.measured_vs_model(ax, x, x * 1.1, x)
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["measured", "model"]
    plt.close(fig)


def test_explorer_draws_static_figure_and_builds_controls(capsys):
    calls = []

    def draw(size=1.0, algo="ring", log_n=10.0, count=3, show=True):
        calls.append((size, algo, log_n, count, show))
        fig, ax = plotting.figure()
        ax.plot([0, 1], [0, size])
        return fig

    box = widgets.explorer(draw, size=(0.5, 2.0, 0.1, 1.0), algo=["ring", "tree"],
                           log_n=(1.0, 1e6, 0.5, 10.0, "log"), count=(1, 8, 1, 3), show=True)
    assert calls[0] == (1.0, "ring", 10.0, 3, True)  # the static figure used the defaults
    controls = box.children[0].children
    assert [c.description for c in controls] == ["size", "algo", "log_n", "count", "show"]
    assert type(controls[2]).__name__ == "FloatLogSlider"
    assert type(controls[3]).__name__ == "IntSlider"


@pytest.mark.parametrize("spec, msg", [
    ((0, 1, 0.1, 5), "outside"),
    ((1, 10, 1, 2, "lin"), "log"),
    ("bad", "use"),
    ([], "at least one"),
])
def test_explorer_rejects_bad_controls(spec, msg):
    with pytest.raises(ValueError, match=msg):
        widgets.explorer(lambda x=None: None, x=spec)


def test_explorer_names_unknown_parameters():
    with pytest.raises(ValueError, match="nope"):
        widgets.explorer(lambda x=1: None, nope=(0, 1, 1, 0))


@pytest.mark.parametrize("lo, hi", [(2, 500), (0.8, 100), (3, 40), (1e3, 1e9), (0.02, 0.5)])
def test_every_log_axis_has_three_labelled_ticks(lo, hi):
    # 2 to 500 holds only two powers of ten: the locator adds 2s and 5s there
    ticks = [x for x in plotting.EnoughLogTicks(base=10).tick_values(lo, hi) if lo <= x <= hi]
    assert len(ticks) >= 3, ticks
