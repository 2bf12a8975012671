"""House style for the book's figures: one look, set in one place.

`figure()` gives a styled figure and axes; `measured_vs_model()` draws the book's most common
plot, measured points against a model curve, so every chapter shows them the same way.
"""

from __future__ import annotations

import math
import re

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import ticker

# Colour-blind-safe palette (Okabe and Ito, 2008): measured data, model, and accents.
PALETTE = {
    "measured": "#0072B2",
    "model": "#D55E00",
    "accent": "#009E73",
    "muted": "#999999",
    "extra": "#CC79A7",
    "highlight": "#E69F00",
}

_STYLE = {
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.frameon": False,
    "font.size": 10,
}


class EnoughLogTicks(ticker.LogLocator):
    """Decade ticks where the axis holds three powers of ten or more, and 1-2-5 ticks where
    it holds fewer (2 to 500 holds only 10 and 100), so every log axis carries at least
    three labelled ticks."""

    def tick_values(self, vmin, vmax):
        self._subs = np.array([1.0])
        if vmin > 0 and vmax > 0:
            lo, hi = sorted((vmin, vmax))
            powers = math.floor(math.log10(hi) + 1e-9) - math.ceil(math.log10(lo) - 1e-9) + 1
            if powers < 3:
                self._subs = np.array([1.0, 2.0, 5.0])
        return super().tick_values(vmin, vmax)


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def pretty_powers(text: str) -> str:
    """Write "1e+23" and "3.2e-05" in a title or label as 10²³ and 3.2×10⁻⁵."""
    def one(m):
        mant, exp = m.group(1), str(int(m.group(2)))
        power = "10" + exp.translate(_SUPERSCRIPT)
        return power if float(mant) == 1 else f"{mant}×{power}"
    return re.sub(r"(\d+(?:\.\d+)?)e([+-]?\d+)", one, text)


def _tick_label(x, _pos=None) -> str:
    """0.02, 5, 300 as themselves; beyond that 10⁶ or 2×10⁶ (never 1e+06)."""
    if x <= 0 or not math.isfinite(x):
        return ""
    e = math.floor(math.log10(x) + 1e-9)
    if -2 <= e <= 3:
        return f"{x:g}"
    m = round(x / 10**e, 6)
    return f"$10^{{{e}}}$" if m == 1 else f"${m:g}\\times10^{{{e}}}$"


def log_ticks(ax, axis: str = "both"):
    """Give an axis (or both) enough labelled ticks on a log scale (see EnoughLogTicks)."""
    for which in ("x", "y") if axis == "both" else (axis,):
        a = getattr(ax, f"{which}axis")
        if a.get_scale() == "log":
            a.set_major_locator(EnoughLogTicks(base=10))
            a.set_major_formatter(ticker.FuncFormatter(_tick_label))
            a.set_minor_formatter(ticker.NullFormatter())
    return ax


def figure(title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
           logx: bool = False, logy: bool = False, figsize: tuple[float, float] | None = None):
    """A figure and axes in the house style; returns ``(fig, ax)``."""
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=figsize or _STYLE["figure.figsize"])
        ax.grid(True, which="major", alpha=0.3)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    if title:
        ax.set_title(pretty_powers(title))
    if xlabel:
        ax.set_xlabel(pretty_powers(xlabel))
    if ylabel:
        ax.set_ylabel(pretty_powers(ylabel))
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    log_ticks(ax)
    return fig, ax


def measured_vs_model(ax, x, measured, model, measured_label: str = "measured",
                      model_label: str = "model"):
    """Measured values as points and the model as a line, on the same axes."""
    ax.plot(x, measured, "o", color=PALETTE["measured"], label=measured_label, markersize=5)
    ax.plot(x, model, "-", color=PALETTE["model"], label=model_label, linewidth=2)
    ax.legend()
    return ax
