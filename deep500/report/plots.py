"""Plots for reports (matplotlib): each written as PNG (embedded in report.html) and,
with ``also``, as SVG (text kept as text, so it can be searched and restyled) or PDF
next to it. A series with nothing to draw gets neither a bar nor a legend entry."""
from __future__ import annotations

import math
import os

import numpy as np

from deep500.results.safe_write import atomic_file, prepare_folder
from deep500.utils.errors import Deep500Error, require

FIGURE_FORMATS = ("svg", "pdf")

# At most this many groups (tick labels) and series (legend entries) per bar chart: a
# chart of thousands is unreadable and takes minutes to lay out. The rest is left out,
# and the title says so (the section's table lists everything).
MAX_GROUPS = 40
MAX_SERIES = 12
MAX_BARS = 160  # groups × series: fewer groups where there are many series
PANEL_COLUMNS = 3  # line panels side by side at most; more go to further rows

_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">")
_DASHES = ("-", "--", ":", "-.")


def series_style(index: int) -> dict:
    """Colour, marker and dash of the ``index``-th series of a line plot: ten colours,
    and a marker per series, so that series stay apart in grey print and beyond ten
    (the dash changes every ten)."""
    return {"color": f"C{index % 10}", "marker": _MARKERS[index % len(_MARKERS)],
            "linestyle": _DASHES[(index // 10) % len(_DASHES)]}


def _pyplot():
    require("matplotlib", "plot", "Plotting reports")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def check_figure_format(also: str | None) -> str | None:
    if also is not None and also not in FIGURE_FORMATS:
        raise Deep500Error(f"figure format {also!r} is not supported; use one of "
                           f"{list(FIGURE_FORMATS)} (every plot is also written as PNG)")
    return also


def companion(path: str, also: str | None) -> str | None:
    """Where the ``also`` copy of the PNG at ``path`` goes, or ``None``."""
    return None if also is None else os.path.splitext(path)[0] + "." + also


PNG_DPI = 110


def save(figure, path: str, also: str | None = "svg", **options) -> str:
    """Write ``figure`` to ``path`` (PNG) and to its ``also`` companion; close it.

    ``bbox_inches="tight"`` crops both to the box savefig would crop the PNG to,
    measured once: savefig would lay the figure out twice per file to find it, and
    once more per file for the inert layout engine ``tight_layout`` leaves behind. The
    PNG is the same to the byte; the SVG is cropped to the same box in inches (text
    measured at 110 dpi, not 72). A 2-rank distributed run's report: 15-16.5 CPU-s
    before, 8-9 after."""
    plt = _pyplot()
    check_figure_format(also)
    # a planted link (plots/ itself, or a plot's name) never gets written through
    prepare_folder(os.path.dirname(os.path.abspath(path)), "the report's plots")
    if options.get("bbox_inches") == "tight":
        options["bbox_inches"] = _tight_box(figure)
    _drop_inert_layout_engine(figure)
    with atomic_file(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=PNG_DPI, **options)
    if also is not None:
        # svg.fonttype none: text stays <text>, not outlines
        with plt.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42}), \
                atomic_file(companion(path, also), "wb") as handle:
            figure.savefig(handle, format=also, **options)
    plt.close(figure)
    return path


def _tight_box(figure):
    """The figure's tight bounding box (inches) as ``savefig(bbox_inches="tight")``
    finds it for the PNG: laid out at the PNG's dpi, padded by ``savefig.pad_inches``."""
    import matplotlib
    dpi = figure.dpi
    figure.set_dpi(PNG_DPI)  # text extents depend on the dpi
    try:
        figure.draw_without_rendering()  # titles and tick labels take their places
        box = figure.get_tightbbox()
    finally:
        figure.set_dpi(dpi)
    return box.padded(matplotlib.rcParams["savefig.pad_inches"])


def _drop_inert_layout_engine(figure) -> None:
    """``tight_layout`` leaves a placeholder engine that does nothing, but savefig lays
    a figure with any engine out once more before drawing it."""
    import matplotlib
    from matplotlib.layout_engine import PlaceHolderLayoutEngine
    if isinstance(figure.get_layout_engine(), PlaceHolderLayoutEngine):
        # None means "no engine" only while these rc settings are off
        with matplotlib.rc_context({"figure.autolayout": False,
                                    "figure.constrained_layout.use": False}):
            figure.set_layout_engine(None)


def legend_name(name) -> str:
    """matplotlib leaves out legend labels that start with '_'; such names keep a
    leading zero-width space."""
    text = str(name)
    return "\u200b" + text if text.startswith("_") else text


def group_cap(series: int = 1) -> int:
    """How many groups a bar chart of ``series`` series shows at most."""
    return max(5, min(MAX_GROUPS, MAX_BARS // max(min(series, MAX_SERIES), 1)))


def cap_note(groups: int, series: int = 1) -> str:
    """What a bar chart of ``groups`` × ``series`` leaves out ('' when nothing)."""
    parts = []
    if groups > group_cap(series):
        parts.append(f"the first {group_cap(series)} of {groups} groups")
    if series > MAX_SERIES:
        parts.append(f"the first {MAX_SERIES} of {series} series")
    return (" and ".join(parts) + " shown, in the order measured; the table has them "
            "all") if parts else ""


def _capped_title(title: str, groups: int, series: int = 1) -> str:
    note = cap_note(groups, series)
    return f"{title}\n({note})" if note else title


def _width(labels) -> float:
    """Inches for a horizontal bar chart: 9, more where long bar labels need it."""
    return max(9.0, 5.5 + 0.065 * max((len(str(t)) for t in labels), default=0))


def _legend_below(figure, axes, entries: int) -> None:
    """The legend under the chart, outside its axes (inside, it covers bars: a stacked
    bar fills the whole width); ``save(..., bbox_inches="tight")`` keeps it whole."""
    figure.tight_layout()
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                bbox_transform=figure.transFigure, ncol=max(1, min(entries, 4)),
                frameon=False)


def _finite(value) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def grouped_bars(path: str, title: str, groups: list[str], series: dict[str, list],
                 errors: dict[str, list] | None = None, xlabel: str = "",
                 log_scale: bool = False, also: str | None = "svg") -> str:
    """Horizontal grouped bars: one group per entry of ``groups``, one bar per series.

    ``series[name][i]`` is the value for group i (None = missing); ``errors[name][i]``
    is (low, high) of its confidence interval (None = none). Series without any value
    are left out, legend entry included; so are groups beyond MAX_GROUPS and series
    beyond MAX_SERIES (the title says so).
    """
    plt = _pyplot()
    names = [n for n in series if any(_finite(v) for v in series[n])]
    title = _capped_title(title, len(groups), len(names))
    names, groups = names[:MAX_SERIES], groups[:group_cap(len(names))]
    height = 0.8 / max(len(names), 1)
    figure, axes = plt.subplots(figsize=(_width(groups),
                                         0.22 * len(groups) * max(len(names), 1) + 1.8))
    positions = np.arange(len(groups))
    for k, name in enumerate(names):
        values = [v if _finite(v) else np.nan for v in series[name][:len(groups)]]
        offsets = positions + (k - (len(names) - 1) / 2) * height
        xerr = None
        if errors and name in errors:
            lows = [v - lo if _finite(lo) and v == v else 0
                    for v, (lo, _) in zip(values, errors[name])]
            highs = [hi - v if _finite(hi) and v == v else 0
                     for v, (_, hi) in zip(values, errors[name])]
            xerr = np.array([lows, highs])
        axes.barh(offsets, values, height=height, xerr=xerr, capsize=2,
                  label=legend_name(name))
    axes.set_yticks(positions)
    axes.set_yticklabels(groups, fontsize=8)
    axes.invert_yaxis()
    if log_scale:
        axes.set_xscale("log")
    axes.set_xlabel(xlabel)
    axes.set_title(title)
    axes.grid(axis="x", alpha=0.3)
    if names:
        _legend_below(figure, axes, len(names))
    else:
        figure.tight_layout()
    return save(figure, path, also, bbox_inches="tight")


def stacked_bars(path: str, title: str, bars: list[str], segments: dict[str, list],
                 xlabel: str = "", top: int = 8, also: str | None = "svg") -> str:
    """Horizontal stacked bars: one bar per entry of ``bars``, one segment per key of
    ``segments`` (the ``top`` largest overall; the rest summed as 'other'); segments
    that are zero in every bar are left out; so are bars beyond MAX_GROUPS (the title
    says so)."""
    plt = _pyplot()
    title = _capped_title(title, len(bars))
    bars = bars[:MAX_GROUPS]
    segments = {k: [v if _finite(v) else 0.0 for v in values[:MAX_GROUPS]]
                for k, values in segments.items()}
    segments = {k: v for k, v in segments.items() if any(v)}
    totals = {k: sum(v) for k, v in segments.items()}
    keep = sorted(totals, key=totals.get, reverse=True)[:top]
    shown = {k: segments[k] for k in keep}
    rest = [sum(segments[k][i] for k in segments if k not in keep) for i in range(len(bars))]
    if any(rest):
        shown["other"] = rest
    figure, axes = plt.subplots(figsize=(_width(bars), 0.35 * len(bars) + 1.8))
    left = np.zeros(len(bars))
    for name, values in shown.items():
        axes.barh(np.arange(len(bars)), values, left=left, label=legend_name(name))
        left += np.array(values, dtype=float)
    axes.set_yticks(np.arange(len(bars)))
    axes.set_yticklabels(bars, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel(xlabel)
    axes.set_title(title)
    if shown:
        _legend_below(figure, axes, len(shown))
    else:
        figure.tight_layout()
    return save(figure, path, also, bbox_inches="tight")


def line_panels(path: str, title: str, panels: list[tuple[str, str, dict]],
                xlabel: str = "", log_scale: tuple = (), also: str | None = "svg",
                bands: list[dict] | None = None) -> str:
    """Side-by-side line plots sharing one legend: ``panels`` is a list of
    ``(panel title, y label, {series name: (xs, ys)})``; panels whose index is in
    ``log_scale`` use a logarithmic y axis (non-positive values are left out).
    ``bands[i][name] = (lows, highs)`` shades a range around series ``name`` of panel
    ``i`` (e.g. the spread over seeds). A series is drawn in the same colour in every
    panel, and is in the legend once, if some panel has a point of it."""
    plt = _pyplot()
    # At most PANEL_COLUMNS side by side: a row of five 5-inch panels is scaled to a
    # third in the page and its text becomes unreadable.
    columns_of_panels = min(len(panels), PANEL_COLUMNS)
    rows_of_panels = -(-len(panels) // columns_of_panels)
    figure, axes_grid = plt.subplots(rows_of_panels, columns_of_panels,
                                     figsize=(5.2 * columns_of_panels,
                                              3.9 * rows_of_panels + 0.3), squeeze=False)
    axes_list = [list(axes_grid.flat)]
    for unused in axes_list[0][len(panels):]:
        unused.set_visible(False)
    names = list(dict.fromkeys(n for _, _, series in panels for n in series))
    styles = {n: series_style(i) for i, n in enumerate(names)}
    colours = {n: style["color"] for n, style in styles.items()}
    handles = {}
    for index, (axes, (panel_title, ylabel, series)) in enumerate(zip(axes_list[0], panels)):
        for name, (xs, ys) in series.items():
            xs = np.asarray(xs, dtype=float)
            ys = np.asarray([v if _finite(v) else np.nan for v in ys], dtype=float)
            if index in log_scale:
                ys = np.where(ys > 0, ys, np.nan)
            if not np.isfinite(ys).any():
                continue
            (line,) = axes.plot(xs, ys, label=legend_name(name), linewidth=1.3,
                                markevery=max(1, len(xs) // 8), markersize=4,
                                **styles[name])
            handles.setdefault(name, line)
            band = (bands[index] if bands and index < len(bands) else {}).get(name)
            if band is not None:
                lows = np.asarray([v if _finite(v) else np.nan for v in band[0]], float)
                highs = np.asarray([v if _finite(v) else np.nan for v in band[1]], float)
                axes.fill_between(xs, lows, highs, color=colours[name], alpha=0.2,
                                  linewidth=0)
        if index in log_scale and axes.lines:
            axes.set_yscale("log")
        if all(float(x).is_integer() for _, (xs, _) in series.items() for x in xs):
            from matplotlib.ticker import MaxNLocator
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs, steps
        axes.set_title(panel_title, fontsize=10)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
    labels = [legend_name(n) for n in names if n in handles]
    lines = [handles[n] for n in names if n in handles]
    # long series names: fewer legend columns than panels + 1 would overflow the figure
    columns = min(columns_of_panels + 1, 3, max(len(labels), 1))
    figure.suptitle(title)
    figure.tight_layout()
    if lines:
        # under the panels, outside them; bbox_inches="tight" keeps it whole
        figure.legend(lines, labels, fontsize=9, loc="upper center", ncol=columns,
                      bbox_to_anchor=(0.5, 0.0), frameon=False)
    return save(figure, path, also, bbox_inches="tight")
