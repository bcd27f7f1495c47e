"""Plots of the report's "Predicted vs measured" section (matplotlib, written as
``plots.save`` writes every report plot): predicted against measured step time on the
line y = x, and predicted scaling curves against the rank count on a log2 axis."""
from __future__ import annotations

import math

from deep500.report.plots import _pyplot, legend_name, save

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
LINE_STYLES = ("-", "--", ":", "-.")


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def prediction_scatter(path: str, title: str, points: list[dict],
                       band: float | None = None, also: str | None = "svg") -> str:
    """``points``: ``{"model", "algorithm", "predicted_s", "measured_s"}``; one colour
    per model, one marker per algorithm, both axes logarithmic in milliseconds, the
    line y = x and (``band``) the lines y = (1 ± band) x."""
    plt = _pyplot()
    points = [p for p in points if _positive(p["predicted_s"]) and _positive(p["measured_s"])]
    models = list(dict.fromkeys(p["model"] for p in points))
    algorithms = list(dict.fromkeys(p["algorithm"] for p in points))
    figure, axes = plt.subplots(figsize=(6.8, 6.0))
    for i, model in enumerate(models):
        for j, algorithm in enumerate(algorithms):
            chosen = [p for p in points if p["model"] == model and p["algorithm"] == algorithm]
            if not chosen:
                continue
            axes.scatter([p["measured_s"] * 1e3 for p in chosen],
                         [p["predicted_s"] * 1e3 for p in chosen], s=36,
                         color=f"C{i % 10}", marker=MARKERS[j % len(MARKERS)],
                         label=legend_name(f"{model} · {algorithm}"), alpha=0.85)
    values = [v * 1e3 for p in points for v in (p["predicted_s"], p["measured_s"])]
    if values:
        low, high = min(values) / 1.5, max(values) * 1.5
        axes.plot([low, high], [low, high], "k-", linewidth=0.8, label="y = x")
        if band:
            for factor, style in ((1 + band, ":"), (max(1 - band, 1e-3), ":")):
                axes.plot([low, high], [low * factor, high * factor], "k" + style,
                          linewidth=0.7)
            axes.plot([], [], "k:", linewidth=0.7, label=f"±{band:.0%}")
        axes.set_xlim(low, high)
        axes.set_ylim(low, high)
    axes.set_xscale("log")
    axes.set_yscale("log")
    for axis in (axes.xaxis, axes.yaxis):
        _plain_ticks(axis)
    axes.set_aspect("equal", adjustable="box")
    axes.set_xlabel("measured step time (ms)")
    axes.set_ylabel("predicted step time (ms)")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3, which="both")
    if points:
        axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    return save(figure, path, also)


def scaling_curves(path: str, title: str, panels: list[tuple[str, str, dict]],
                   log_y: tuple = (), styles: dict | None = None,
                   also: str | None = "svg") -> str:
    """Panels ``(title, y label, {series: (ranks, values)})`` in a grid of two columns,
    against the rank count on a log2 axis; panels whose index is in ``log_y`` have a
    log y axis. ``styles[series] = (colour index, line style index)`` (default: one
    colour per series); a series keeps its style across panels and is in the legend
    once."""
    plt = _pyplot()
    columns = min(2, len(panels))
    rows = -(-len(panels) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(5.4 * columns, 3.6 * rows),
                                squeeze=False)
    names = list(dict.fromkeys(n for _, _, series in panels for n in series))
    styles = styles or {n: (i, 0) for i, n in enumerate(names)}
    handles = {}
    for index, (panel_title, ylabel, series) in enumerate(panels):
        axes = grid[index // columns][index % columns]
        for name, (ranks, values) in series.items():
            pairs = [(r, v) for r, v in zip(ranks, values)
                     if isinstance(v, (int, float)) and math.isfinite(v)
                     and (v > 0 or index not in log_y)]
            if not pairs:
                continue
            colour, style = styles.get(name, (names.index(name), 0))
            (line,) = axes.plot([r for r, _ in pairs], [v for _, v in pairs],
                                marker=MARKERS[colour % len(MARKERS)], markersize=3.5,
                                linewidth=1.1, color=f"C{colour % 10}",
                                linestyle=LINE_STYLES[style % len(LINE_STYLES)],
                                label=legend_name(name))
            handles.setdefault(name, line)
        axes.set_xscale("log", base=2)
        if index in log_y and axes.lines:
            axes.set_yscale("log")
            _plain_ticks(axes.yaxis)
        axes.set_title(panel_title, fontsize=9)
        axes.set_xlabel("ranks")
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3, which="both")
    for index in range(len(panels), rows * columns):
        grid[index // columns][index % columns].set_visible(False)
    labels = [legend_name(n) for n in names if n in handles]
    figure.suptitle(title)
    if labels:
        ncol = min(3, len(labels))
        figure.legend([handles[n] for n in names if n in handles], labels, fontsize=7,
                      loc="lower center", ncol=ncol)
        lines = -(-len(labels) // ncol)
        figure.tight_layout(rect=(0, 0.03 * lines + 0.02, 1, 1))
    else:
        figure.tight_layout()
    return save(figure, path, also, bbox_inches="tight")


def _plain_ticks(axis) -> None:
    """Tick labels of a log axis as plain numbers (0.2, 1, 5), not powers of ten; of
    the minor ticks only those at 2 and 5 times a power of ten are labelled."""
    from matplotlib.ticker import FuncFormatter

    def label(value, _):
        leading = f"{value:.0e}"[0]
        return f"{value:g}" if leading in "125" else ""
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(FuncFormatter(label))
