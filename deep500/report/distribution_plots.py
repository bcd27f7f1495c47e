"""Level-0 results as distributions over operators, per framework: the Deep500 paper's
Fig. 6 (Ben-Nun et al., IPDPS 2019), which shows every DeepBench GEMM and convolution
at once as one violin per framework instead of one bar per size.

For each operator type measured at two or more sizes, each series (a framework, with
any other varied setting) gets a violin of its median times per call (log scale: sizes
span decades) and one of its achieved GFLOP/s, a box of the quartiles inside each; the
median ℓ∞ error against the float64 reference (MaxError, relative to ‖y_ref‖∞) is
written under each framework's name, and a table gives the same medians with
quartiles. Each value is a configuration's median (its mean over seeds where seeds are
folded, :class:`deep500.report.time_bars.RecordGrid`)."""
from __future__ import annotations

import math
import os
from collections import OrderedDict

import numpy as np

from deep500.report import plots
from deep500.report.tables import Table, fmt_number, fmt_time
from deep500.report.time_bars import RecordGrid

# (key, metric, summary field, axis label); "linf" is the error printed, not drawn
QUANTITIES = (("time", "WallclockTime", "median", "median time per call"),
              ("gflops", "FLOPs", "gflops_per_s", "achieved GFLOP/s"),
              ("linf", "MaxError", "relative", "ℓ∞ error"))


def _finite(values) -> list[float]:
    return [float(v) for v in values
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def distributions(grid: RecordGrid, op_type_of: dict) -> "OrderedDict[str, dict]":
    """``{op_type: {series: {quantity: [values over that type's operators]}}}`` for the
    operator types with two or more sizes in some series (``op_type_of``: group label
    → ONNX operator type)."""
    found: "OrderedDict[str, dict]" = OrderedDict()
    for op_type in OrderedDict.fromkeys(op_type_of[g] for g in grid.groups):
        groups = [g for g in grid.groups if op_type_of[g] == op_type]
        per_series = OrderedDict()
        for key, metric, field, _ in QUANTITIES:
            for series, values in grid.values(metric, field, groups).items():
                per_series.setdefault(series, {})[key] = _finite(values)
        per_series = OrderedDict((s, q) for s, q in per_series.items() if q["time"])
        if any(len(q["time"]) >= 2 for q in per_series.values()):
            found[op_type] = per_series
    return found


def _quartiles(values: list[float], fmt) -> str:
    """``median [first quartile, third quartile]``, or n/a for no values."""
    if not values:
        return "n/a"
    low, mid, high = (float(v) for v in np.percentile(values, [25, 50, 75]))
    return f"{fmt(mid)} [{fmt(low)}, {fmt(high)}]"


def distribution_table(op_type: str, per_series: dict) -> Table:
    rows = []
    for series, q in per_series.items():
        time, gflops, linf = q["time"], q["gflops"], q["linf"]
        rows.append([series, len(time), _quartiles(time, fmt_time),
                     _quartiles(gflops, fmt_number),
                     fmt_number(float(np.median(linf))) if linf else "n/a",
                     fmt_number(max(linf)) if linf else "n/a"])
    return Table(f"Level 0 — {op_type} over its sizes, per framework",
                 ["Framework", "Sizes", "Median time [quartiles]",
                  "Median GFLOP/s [quartiles]", "Median ℓ∞ error", "Largest ℓ∞ error"],
                 rows, note=(
                     "Each size contributes its median time (its mean over seeds where "
                     "seeds are folded); quartiles over the sizes. ℓ∞ error: MaxError, "
                     "‖y − y_ref‖∞ / ‖y_ref‖∞ against the float64 NumPy reference "
                     "(Deep500 paper, Fig. 6)."))


def _violins(axes, data: list[list[float]], log: bool) -> None:
    """A violin per non-empty list at x = 1, 2, ..., with a box of its quartiles; one
    value alone is a point (a violin needs two)."""
    for x, values in enumerate(data, start=1):
        values = np.log10(values) if log else np.asarray(values, dtype=float)
        if len(values) >= 2 and np.ptp(values) > 0:
            parts = axes.violinplot([values], positions=[x], widths=0.8,
                                    showextrema=False)
            for body in parts["bodies"]:
                body.set_facecolor(f"C{(x - 1) % 10}")
                body.set_alpha(0.35)
        if len(values):
            axes.boxplot([values], positions=[x], widths=0.15, showfliers=False,
                         medianprops={"color": "black"})
            axes.plot(np.full(len(values), x), values, ".", color=f"C{(x - 1) % 10}",
                      markersize=3, alpha=0.6)
    if log:
        _time_ticks(axes, [v for values in data for v in values])


def _time_ticks(axes, seconds: list[float]) -> None:
    """Ticks at 1, 2 and 5 × 10^k s on an axis of log10(seconds), labelled as times
    (only 1 × 10^k where those would be more than 8)."""
    if not seconds:
        return
    low, high = math.log10(min(seconds)), math.log10(max(seconds))
    decades = range(math.floor(low), math.ceil(high) + 1)
    for steps in ((1, 2, 5), (1,)):
        ticks = [math.log10(m) + k for k in decades for m in steps
                 if low - 0.05 <= math.log10(m) + k <= high + 0.05]
        if len(ticks) <= 8:
            break
    if len(ticks) < 2:
        ticks = [low, high] if high > low else [low]
    axes.set_yticks(ticks)
    axes.set_yticklabels([fmt_time(10 ** t) for t in ticks], fontsize=8)


def distribution_figure(path: str, op_type: str, per_series: dict,
                        also: str | None = "svg") -> str:
    """Two panels side by side, time per call and GFLOP/s, one violin per series; the
    median ℓ∞ error under each series' name (at most ``plots.MAX_SERIES`` series)."""
    plt = plots._pyplot()
    names = list(per_series)[:plots.MAX_SERIES]
    sizes = max(len(per_series[n]["time"]) for n in names)
    figure, (left, right) = plt.subplots(1, 2, figsize=(max(9.0, 2.2 * len(names) + 4),
                                                        4.6))
    ticks = []
    for name in names:
        linf = per_series[name]["linf"]
        ticks.append(plots.legend_name(name) + "\n" + (
            f"median ℓ∞ {fmt_number(float(np.median(linf)))}" if linf else "ℓ∞ n/a"))
    for axes, key, log in ((left, "time", True), (right, "gflops", False)):
        _violins(axes, [per_series[n][key] for n in names], log)
        axes.set_xticks(range(1, len(names) + 1))
        axes.set_xticklabels(ticks, fontsize=8)
        axes.set_xlim(0.4, len(names) + 0.6)
        axes.set_ylabel(next(label for k, _, _, label in QUANTITIES if k == key))
        axes.grid(axis="y", alpha=0.3)
    left.set_title("Time per call", fontsize=10)
    right.set_title("Achieved GFLOP/s", fontsize=10)
    more = (f"; the first {plots.MAX_SERIES} of {len(per_series)} series"
            if len(per_series) > len(names) else "")
    figure.suptitle(f"{op_type}: {sizes} sizes, one violin per framework{more}")
    figure.tight_layout()
    return plots.save(figure, path, also)


def build(grid: RecordGrid, op_type_of: dict, output_dir: str,
          figure_format: str | None) -> tuple[list[Table], list[tuple[str, str]]]:
    """The tables and plots of every operator type measured at two or more sizes."""
    tables, figures = [], []
    for op_type, per_series in distributions(grid, op_type_of).items():
        tables.append(distribution_table(op_type, per_series))
        path = os.path.join(output_dir, "plots", f"level0_distribution_{op_type}.png")
        distribution_figure(path, op_type, per_series, figure_format)
        figures.append((f"{op_type} over its sizes: time and GFLOP/s per framework, "
                        f"median ℓ∞ error under each name (paper Fig. 6)", path))
    return tables, figures
