"""Rank 0's records laid out as bars: one group per measured thing (an operator, a
network), one series per runner and varied setting (:class:`RecordGrid`); and the
level-0 and level-1 sections' plot of the median time with its 95% CI on it
(:func:`median_time_bars`)."""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from deep500.report.plots import grouped_bars
from deep500.report.records import summary


class RecordGrid:
    """Rank 0's ``records`` by (group, series): ``groups`` and ``series`` in the order
    first measured."""

    def __init__(self, records: list[dict], group_of: Callable[[dict], str],
                 series_of: Callable[[dict], str]):
        rank0 = [r for r in records if r.get("rank", 0) == 0]
        self.groups = list(OrderedDict.fromkeys(group_of(r) for r in rank0))
        self.series = list(OrderedDict.fromkeys(series_of(r) for r in rank0))
        self._records = {(group_of(r), series_of(r)): r for r in rank0}

    def record(self, group: str, series: str) -> dict:
        """The record of ``group`` in ``series`` (empty where none was measured)."""
        return self._records.get((group, series), {})

    def values(self, metric: str, field: str, groups: list[str] | None = None) -> dict:
        """``{series: [the metric's summary field per group]}`` (None where missing)."""
        return {s: [summary(self.record(g, s), metric, field)
                    for g in (self.groups if groups is None else groups)]
                for s in self.series}


def median_time_bars(path: str, title: str, grid: RecordGrid, also) -> str | None:
    """Grouped bars of WallclockTime's median with its 95% CI, on a log scale; written
    to ``path`` (None, nothing written, where no record has a time)."""
    times = grid.values("WallclockTime", "median")
    if not any(v is not None for values in times.values() for v in values):
        return None
    lows, highs = grid.values("WallclockTime", "ci_low"), grid.values("WallclockTime",
                                                                      "ci_high")
    cis = {s: list(zip(lows[s], highs[s])) for s in grid.series}
    grouped_bars(path, title, grid.groups, times, cis, xlabel="seconds (log scale)",
                 log_scale=True, also=also)
    return path
