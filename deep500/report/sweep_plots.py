"""The figure of ``deep500 predict --sweep`` (a view of its JSON, ``recipe.predict_sweep``):
predicted step time over a grid of what-if axes, as in Catalán's thesis, Figs. 4.6 and
4.7.

One line panel per swept axis (step time, its compute and exposed communication, in
ms, and the communication fraction on a second axis, against the axis; the other axes
at their slice values), then one heatmap per pair of swept axes (step time in ms,
colour bar beside it, the other axes at their slice values). Axes swept as a range
(``a..b``, log-spaced) and lists spanning 4x or more are drawn on log scales, ticked at
the swept values."""
from __future__ import annotations

import itertools
import math
import textwrap

import numpy as np

from deep500.report.plots import _pyplot, save

# how a unit is shown: (unit shown, factor from the JSON's unit)
_SHOWN = {"bit/s": ("Gbit/s", 1e-9), "s/byte": ("ns/byte", 1e9), "x": ("x", 1.0)}


def value_text(unit: str, value) -> str:
    """One axis value with its unit, as tables and plots show it."""
    if value is None:
        return "-"
    shown, factor = _SHOWN.get(unit, (unit, 1.0))
    if unit in ("ranks", "samples"):
        return f"{int(value)}"
    return f"{value * factor:.3g} {shown}" if shown != "x" else f"{value:.3g}x"


def _title(axis: dict) -> str:
    shown = _SHOWN.get(axis["unit"], (axis["unit"], 1.0))[0]
    return axis["label"] if shown in ("ranks", "x") else f"{axis['label']} ({shown})"


def _shown(axis: dict, values) -> np.ndarray:
    return np.asarray(values, float) * _SHOWN.get(axis["unit"], ("", 1.0))[1]


def _log(axis: dict) -> bool:
    values = axis["values"]
    return axis["spacing"] == "log" or (len(values) > 1 and max(values) >= 4 * min(values))


def _ticks(ticks, axis: dict, values, log: bool) -> None:
    """``ticks`` (an x or y axis of a panel) ticked at the swept values, labelled
    plainly (no minor labels: they overlap on short log ranges)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator
    shown = _shown(axis, values)
    if len(shown) > 8:   # every other value, the last one kept
        shown = shown[::-1][::2][::-1]
    ticks.set_major_locator(FixedLocator(shown))
    ticks.set_major_formatter(_plain_formatter())
    if log:
        ticks.set_minor_locator(NullLocator())
        ticks.set_minor_formatter(NullFormatter())


def _plain_formatter():
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda v, _: f"{v:.3g}")


def _edges(centres: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges half-way between the centres (in log space on a log axis)."""
    x = np.log(centres) if log else centres.astype(float)
    if len(x) == 1:
        half = 0.5 if log else max(abs(x[0]) * 0.25, 0.5)
        edges = np.array([x[0] - half, x[0] + half])
    else:
        middle = (x[1:] + x[:-1]) / 2
        edges = np.concatenate([[2 * x[0] - middle[0]], middle, [2 * x[-1] - middle[-1]]])
    return np.exp(edges) if log else edges


def _held(axes: list, slices: dict, free: set) -> str:
    held = [f"{a['name']} {value_text(a['unit'], slices[a['name']])}" for a in axes
            if a["name"] not in free]
    return textwrap.fill("at " + ", ".join(held), 64) if held else ""


def _at(points, axes, slices, free: set) -> list:
    return [p for p in points if all(p[a["name"]] == slices[a["name"]]
                                     for a in axes if a["name"] not in free)]


def _line_panel(panel, axis, points, axes, slices):
    name = axis["name"]
    rows = sorted(_at(points, axes, slices, {name}), key=lambda p: p[name])
    x = _shown(axis, [p[name] for p in rows])
    for key, style, label in (("step_s", "o-", "step"), ("compute_s", "s:", "compute"),
                              ("exposed_communication_s", "^-.", "exposed communication")):
        panel.plot(x, [p[key] * 1e3 for p in rows], style, label=label, markersize=4)
    panel.set_xlabel(_title(axis))
    panel.set_ylabel("predicted time (ms)")
    if _log(axis):
        panel.set_xscale("log")
    _ticks(panel.xaxis, axis, axis["values"], _log(axis))
    times = [p[k] for p in rows for k in ("step_s", "compute_s") if p[k] > 0]
    if times and max(times) >= 10 * min(times):
        panel.set_yscale("log")
    fraction = panel.twinx()
    fraction.plot(x, [p["comm_fraction"] for p in rows], "--", color="0.45",
                  label="comm fraction")
    fraction.set_ylim(0, 1.02)
    fraction.set_ylabel("exposed comm / step", color="0.35")
    handles = panel.get_legend_handles_labels()
    extra = fraction.get_legend_handles_labels()
    panel.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=7, loc="best")
    panel.set_title(f"{axis['label']} varied\n{_held(axes, slices, {name})}", fontsize=8)
    panel.grid(True, which="both", alpha=0.3)


def _heatmap(figure, panel, x_axis, y_axis, points, axes, slices):
    from matplotlib.colors import LogNorm, Normalize
    free = {x_axis["name"], y_axis["name"]}
    rows = _at(points, axes, slices, free)
    xs, ys = list(x_axis["values"]), list(y_axis["values"])
    grid = np.full((len(ys), len(xs)), np.nan)
    for p in rows:
        grid[ys.index(p[y_axis["name"]]), xs.index(p[x_axis["name"]])] = p["step_s"] * 1e3
    x_log, y_log = _log(x_axis), _log(y_axis)
    low, high = np.nanmin(grid), np.nanmax(grid)
    norm = LogNorm(low, high) if low > 0 and high >= 10 * low else Normalize(low, high)
    mesh = panel.pcolormesh(_edges(_shown(x_axis, xs), x_log),
                            _edges(_shown(y_axis, ys), y_log), grid, norm=norm,
                            cmap="viridis", shading="flat")
    if x_log:
        panel.set_xscale("log")
    if y_log:
        panel.set_yscale("log")
    _ticks(panel.xaxis, x_axis, xs, x_log)
    _ticks(panel.yaxis, y_axis, ys, y_log)
    if len(xs) <= 8 and len(ys) <= 8:
        middle = math.sqrt(low * high) if isinstance(norm, LogNorm) else (low + high) / 2
        for (i, y), (j, x) in itertools.product(enumerate(_shown(y_axis, ys)),
                                                enumerate(_shown(x_axis, xs))):
            if np.isfinite(grid[i, j]):
                panel.text(x, y, f"{grid[i, j]:.3g}", ha="center", va="center", fontsize=6,
                           color="white" if grid[i, j] < middle else "black")
    bar = figure.colorbar(mesh, ax=panel, label="predicted step time (ms)")
    bar.minorticks_off()
    if isinstance(norm, LogNorm):
        from matplotlib.ticker import LogLocator
        bar.locator = LogLocator(subs=(1.0, 2.0, 5.0))
    bar.formatter = _plain_formatter()
    bar.update_ticks()
    panel.set_xlabel(_title(x_axis))
    panel.set_ylabel(_title(y_axis))
    panel.set_title(f"step time: {y_axis['label']} x {x_axis['label']}\n"
                    f"{_held(axes, slices, free)}", fontsize=8)


def sweep_figure(path: str, data: dict, workload: dict, also: str | None = "svg") -> str:
    """The figure of one workload of a sweep's JSON ``data`` (its ``axes``, ``machine``,
    ``compute``), written as ``plots.save`` writes report plots."""
    plt = _pyplot()
    axes, points, slices = data["axes"], workload["points"], workload["slice"]
    pairs = list(itertools.combinations(axes, 2))
    panels = len(axes) + len(pairs)
    columns = min(panels, 5 if panels > 9 else 3)
    rows = math.ceil(panels / columns)
    figure, grid = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.9 * rows),
                                squeeze=False)
    cells = list(grid.flat)
    for panel, axis in zip(cells, axes):
        _line_panel(panel, axis, points, axes, slices)
    for panel, (x_axis, y_axis) in zip(cells[len(axes):], pairs):
        _heatmap(figure, panel, x_axis, y_axis, points, axes, slices)
    for panel in cells[panels:]:
        panel.axis("off")
    figure.suptitle(f"predicted training step (deep500 predict --sweep): {workload['label']}"
                    f"\nmachine '{data['machine']}', compute {data['compute']}, "
                    f"{workload['algorithm']} allreduce"
                    + (", overlapped" if data.get("overlap") else ", blocking")
                    + f", {data.get('comm_dtype', 'float32')} on the wire", fontsize=10)
    figure.tight_layout()
    return save(figure, path, also=also)
