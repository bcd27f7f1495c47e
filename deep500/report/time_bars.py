"""Rank 0's records laid out as bars: one group per measured thing (an operator, a
network), one series per runner and varied setting (:class:`RecordGrid`); and the
level-0 and level-1 sections' plot of the median time with its 95% CI on it
(:func:`median_time_bars`).

Where one series per seed would be more than a chart shows (``plots.MAX_SERIES``),
the seeds are folded (:func:`series_settings`): a bar is then the mean over the seeds
of their values, with the Student-t 95% CI over the seeds (:mod:`deep500.report.seeds`),
as the training sections aggregate seeds."""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable

from deep500.report import plots
from deep500.report.plots import grouped_bars
from deep500.report.records import Settings, summary
from deep500.report.seeds import mean_ci


class RecordGrid:
    """Rank 0's ``records`` by (group, series): ``groups`` and ``series`` in the order
    first measured. A cell holds every record of its (group, series): one, or one per
    seed where seeds are folded (``folded``)."""

    def __init__(self, records: list[dict], group_of: Callable[[dict], str],
                 series_of: Callable[[dict], str]):
        rank0 = [r for r in records if r.get("rank", 0) == 0]
        self._cells: dict[tuple, list[dict]] = OrderedDict()
        for record in rank0:
            self._cells.setdefault((group_of(record), series_of(record)), []).append(record)
        self.groups = list(OrderedDict.fromkeys(g for g, _ in self._cells))
        self.series = list(OrderedDict.fromkeys(s for _, s in self._cells))
        self.folded = any(len(cell) > 1 for cell in self._cells.values())

    def record(self, group: str, series: str) -> dict:
        """The (last) record of ``group`` in ``series`` (empty where none was measured)."""
        cell = self._cells.get((group, series))
        return cell[-1] if cell else {}

    def cell(self, group: str, series: str) -> list[dict]:
        return self._cells.get((group, series), [])

    def values(self, metric: str, field: str, groups: list[str] | None = None) -> dict:
        """``{series: [the metric's summary field per group]}`` (None where missing);
        the mean over a cell's records where seeds are folded."""
        return {s: [_mean(self.cell(g, s), metric, field)
                    for g in (self.groups if groups is None else groups)]
                for s in self.series}

    def seed_cis(self, metric: str, field: str, groups: list[str] | None = None) -> dict:
        """``{series: [(low, high) of the Student-t 95% CI over a cell's seeds]}``;
        (None, None) for the groups beyond what a chart shows (``plots.MAX_GROUPS``)."""
        out = {}
        groups = self.groups if groups is None else groups
        shown = plots.MAX_GROUPS
        for s in self.series:
            out[s] = []
            for number, g in enumerate(groups):
                if number >= shown:
                    out[s].append((None, None))
                    continue
                values = _field_values(self.cell(g, s), metric, field)
                _, low, high = mean_ci(values) if values else (None, math.nan, math.nan)
                out[s].append((None, None) if math.isnan(low) else (low, high))
        return out


def _field_values(records: list[dict], metric: str, field: str) -> list[float]:
    values = (summary(r, metric, field) for r in records)
    return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def _mean(records: list[dict], metric: str, field: str):
    if len(records) == 1:
        return summary(records[0], metric, field)
    values = _field_values(records, metric, field)
    return sum(values) / len(values) if values else None


def series_settings(records: list[dict], shown, manifest: dict, per_seed: bool,
                    settings: Settings) -> Settings:
    """The settings that name a chart's series: ``settings`` (every varied setting),
    or those without the seed where one series per seed would be more than a chart
    shows (``MAX_SERIES``) and ``per_seed`` is not asked for."""
    if per_seed or "seed" not in settings.keys:
        return settings
    rank0 = [r for r in records if r.get("rank", 0) == 0]
    if len({settings.text(r) for r in rank0}) <= plots.MAX_SERIES:
        return settings
    return Settings(records, shown, manifest, aggregated=("seed",))


def median_time_bars(path: str, what: str, grid: RecordGrid, also) -> str | None:
    """Grouped bars of WallclockTime's median with its 95% CI (or, seeds folded, the
    mean of the seeds' medians with the 95% CI over the seeds), on a log scale, titled
    ``what``; written to ``path`` (None, nothing written, where no record has a time)."""
    times = grid.values("WallclockTime", "median")
    if not any(v is not None for values in times.values() for v in values):
        return None
    if grid.folded:
        cis = grid.seed_cis("WallclockTime", "median")
        title = f"{what} (mean over seeds of the median, 95% CI over seeds)"
    else:
        lows, highs = (grid.values("WallclockTime", "ci_low"),
                       grid.values("WallclockTime", "ci_high"))
        cis = {s: list(zip(lows[s], highs[s])) for s in grid.series}
        title = f"{what} (median, 95% CI)"
    grouped_bars(path, title, grid.groups, times, cis, xlabel="seconds (log scale)",
                 log_scale=True, also=also)
    return path
