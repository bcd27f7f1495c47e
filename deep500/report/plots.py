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


def stacked_bars(path: str, title: str, bars: list[str], segments: dict[str, list],
                 xlabel: str = "", top: int = 8) -> str:
    """Horizontal stacked bars: one bar per entry of ``bars``, one segment per key of
    ``segments`` (the ``top`` largest overall; the rest summed as 'other')."""
    plt = _pyplot()
    totals = {k: sum(v) for k, v in segments.items()}
    keep = sorted(totals, key=totals.get, reverse=True)[:top]
    shown = {k: segments[k] for k in keep}
    rest = [sum(segments[k][i] for k in segments if k not in keep) for i in range(len(bars))]
    if any(rest):
        shown["other"] = rest
    figure, axes = plt.subplots(figsize=(9, 0.35 * len(bars) + 1.8))
    left = np.zeros(len(bars))
    for name, values in shown.items():
        axes.barh(np.arange(len(bars)), values, left=left, label=name)
        left += np.array(values, dtype=float)
    axes.set_yticks(np.arange(len(bars)))
    axes.set_yticklabels(bars, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel(xlabel)
    axes.set_title(title)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def line_panels(path: str, title: str, panels: list[tuple[str, str, dict]],
                xlabel: str = "", log_scale: tuple = ()) -> str:
    """Side-by-side line plots sharing the legend: ``panels`` is a list of
    ``(panel title, y label, {series name: (xs, ys)})``; panels whose index is in
    ``log_scale`` use a logarithmic y axis (non-positive values are left out)."""
    plt = _pyplot()
    figure, axes_list = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2),
                                     squeeze=False)
    for index, (axes, (panel_title, ylabel, series)) in enumerate(zip(axes_list[0], panels)):
        for name, (xs, ys) in series.items():
            xs = np.asarray(xs, dtype=float)
            ys = np.asarray([np.nan if y is None else y for y in ys], dtype=float)
            if index in log_scale:
                ys = np.where(ys > 0, ys, np.nan)
            axes.plot(xs, ys, label=name, linewidth=1.2)
        if index in log_scale:
            axes.set_yscale("log")
        axes.set_title(panel_title, fontsize=10)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
    handles, labels = axes_list[0][0].get_legend_handles_labels()
    # long series names: fewer legend columns than panels + 1 would overflow the figure
    columns = min(len(panels) + 1, 3, max(len(labels), 1))
    figure.legend(handles, labels, fontsize=7, loc="lower center", ncol=columns)
    figure.suptitle(title)
    rows = -(-len(labels) // columns)
    figure.tight_layout(rect=(0, 0.045 * rows + 0.02, 1, 1))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")  # keeps a wide legend whole
    plt.close(figure)
    return path
