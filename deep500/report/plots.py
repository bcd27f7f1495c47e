"""Plots for reports (matplotlib, written as PNG files)."""
from __future__ import annotations

import os

import numpy as np

from deep500.utils.errors import require


def _pyplot():
    require("matplotlib", "plot", "Plotting reports")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def grouped_bars(path: str, title: str, groups: list[str], series: dict[str, list],
                 errors: dict[str, list] | None = None, xlabel: str = "",
                 log_scale: bool = False) -> str:
    """Horizontal grouped bars: one group per entry of ``groups``, one bar per series.

    ``series[name][i]`` is the value for group i (None = missing); ``errors[name][i]``
    is (low, high) of its confidence interval.
    """
    plt = _pyplot()
    names = list(series)
    height = 0.8 / max(len(names), 1)
    figure, axes = plt.subplots(figsize=(9, 0.22 * len(groups) * max(len(names), 1) + 1.8))
    positions = np.arange(len(groups))
    for k, name in enumerate(names):
        values = [v if v is not None else np.nan for v in series[name]]
        offsets = positions + (k - (len(names) - 1) / 2) * height
        xerr = None
        if errors and name in errors:
            lows = [v - lo if lo is not None and v == v else 0
                    for v, (lo, _) in zip(values, errors[name])]
            highs = [hi - v if hi is not None and v == v else 0
                     for v, (_, hi) in zip(values, errors[name])]
            xerr = np.array([lows, highs])
        axes.barh(offsets, values, height=height, xerr=xerr, capsize=2, label=name)
    axes.set_yticks(positions)
    axes.set_yticklabels(groups, fontsize=8)
    axes.invert_yaxis()
    if log_scale:
        axes.set_xscale("log")
    axes.set_xlabel(xlabel)
    axes.set_title(title)
    axes.grid(axis="x", alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
