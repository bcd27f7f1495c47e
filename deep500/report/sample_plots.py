"""A configuration's raw samples, drawn as violins or histograms (pytest-benchmark's
``--benchmark-histogram``, asv's distributions; issue 31, item 5): the median and its CI
say where the samples are, these say how they spread (bimodal runs, a long tail of
slow calls, a warm-up that was too short).

The report keeps each configuration's samples as at most ``reading.SAMPLES_KEPT``
evenly spaced quantiles (min and max included), so a figure of many samples draws
their quantiles; the caption says so."""
from __future__ import annotations

import math

import numpy as np

from deep500.report import plots
from deep500.report.reading import SAMPLES_KEPT
from deep500.report.records import metric
from deep500.utils.errors import Deep500Error

STYLES = ("violin", "histogram")


def check_sample_style(style: str | None) -> str | None:
    if style is not None and style not in STYLES:
        raise Deep500Error(f"samples are drawn as {list(STYLES)}, not {style!r}")
    return style


def samples_of(record: dict, name: str = "WallclockTime") -> list[float]:
    """The finite raw samples (or their kept quantiles) of metric ``name`` in
    ``record``; [] where it kept none."""
    entry = metric(record, name) or {}
    return [float(s) for s in entry.get("samples") or ()
            if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s)]


def widest_first(records: list[dict], limit: int = plots.MAX_SERIES) -> list[dict]:
    """All ``records`` (in order) if at most ``limit``, else the ``limit`` whose
    WallclockTime samples spread most, (largest − smallest) / median, in order: the
    ones worth a look (a CI alone would miss runs too short to have one)."""
    if len(records) <= limit:
        return list(records)

    def spread(record):
        values = samples_of(record)
        middle = float(np.median(values)) if values else 0.0
        return (max(values) - min(values)) / middle if middle > 0 else -math.inf
    chosen = {id(r) for r in sorted(records, key=spread, reverse=True)[:limit]}
    return [r for r in records if id(r) in chosen]


def _scale(samples: dict[str, list[float]]) -> tuple[float, str]:
    """A time unit the samples read well in: (factor, unit)."""
    largest = max((max(v) for v in samples.values() if v), default=1.0)
    for factor, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if largest * factor >= 1:
            return factor, unit
    return 1e9, "ns"


def sample_figure(path: str, title: str, samples: dict[str, list[float]],
                  style: str = "violin", also: str | None = "svg") -> str:
    """One violin per configuration (rows sharing a time axis), or a histogram each
    (small multiples, each on its own axis). ``samples``: label → seconds; labels
    without samples are left out; at most ``plots.MAX_SERIES`` are drawn."""
    check_sample_style(style)
    plt = plots._pyplot()
    samples = {k: v for k, v in samples.items() if v}
    labels = list(samples)[:plots.MAX_SERIES]
    factor, unit = _scale(samples)
    if style == "violin":
        figure, axes = plt.subplots(figsize=(plots._width(labels), 0.45 * len(labels) + 1.6))
        for y, label in enumerate(labels):
            values = np.asarray(samples[label]) * factor
            if len(values) >= 2 and np.ptp(values) > 0:
                parts = axes.violinplot([values], positions=[y], orientation="horizontal",
                                        widths=0.8,
                                        showmedians=True, showextrema=True)
                for body in parts["bodies"]:
                    body.set_alpha(0.4)
            axes.plot(values, np.full(len(values), y), "|", color="black", markersize=6,
                      alpha=0.5)
        axes.set_yticks(range(len(labels)))
        axes.set_yticklabels([plots.legend_name(t) for t in labels], fontsize=8)
        axes.invert_yaxis()
        axes.set_xlabel(f"time per call ({unit})")
        axes.grid(axis="x", alpha=0.3)
        axes.set_title(title, fontsize=10)
    else:
        columns = min(3, len(labels))
        rows = -(-len(labels) // columns)
        figure, grid = plt.subplots(rows, columns, figsize=(4.2 * columns, 2.8 * rows + 0.6),
                                    squeeze=False)
        for index, axes in enumerate(grid.flat):
            if index >= len(labels):
                axes.set_visible(False)
                continue
            values = np.asarray(samples[labels[index]]) * factor
            axes.hist(values, bins=max(5, min(30, int(2 * math.sqrt(len(values))))),
                      color=f"C{index % 10}", alpha=0.8)
            axes.axvline(float(np.median(values)), color="black", linewidth=1)
            axes.set_title(plots.legend_name(labels[index]), fontsize=8)
            axes.set_xlabel(f"time per call ({unit})", fontsize=8)
            axes.tick_params(labelsize=7)
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return plots.save(figure, path, also)


def samples_plot(records: list[dict], label_of, path: str, style: str,
                 also: str | None = "svg") -> list[tuple[str, str]]:
    """A report section's ``[(caption, path)]`` of its rank-0 ``records``' raw times per
    call (``label_of(record)`` names each), as ``style``; [] where none kept samples."""
    rank0 = [r for r in records if r.get("rank", 0) == 0 and samples_of(r)]
    shown = widest_first(rank0)
    if not shown:
        return []
    which = (f"the {len(shown)} of {len(rank0)} configurations whose samples spread "
             f"most, (max − min) / median" if len(shown) < len(rank0)
             else "every configuration")
    sample_figure(path, f"Raw samples of time per call ({which})",
                  {label_of(r): samples_of(r) for r in shown}, style, also)
    return [(f"Raw samples of time per call as {style}s, {which}; more than "
             f"{SAMPLES_KEPT} samples are drawn as {SAMPLES_KEPT} evenly spaced "
             f"quantiles", path)]
