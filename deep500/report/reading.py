"""The records a report reads, streamed from ``results.jsonl`` and kept small: a run of
100k records (a few hundred MB of JSON) fits in memory a few times its size on disk.

Each record is parsed, checked (:func:`deep500.results.files.iter_checked_records`),
and kept without what no section reads:

- the conditions a result and each of its metrics repeat (the record's configuration
  and the manifest say them once);
- raw metric samples, except ``TrajectoryDivergence``'s and those of
  ``TrainingAccuracy`` with ``every`` (their plots draw them), and ``WallclockTime``'s,
  thinned to at most :data:`SAMPLES_KEPT` evenly spaced quantiles
  (:mod:`deep500.report.sample_plots` draws them);
- the threads in force (the manifest has them) and, of the telemetry, all but what a
  row's flags say (``interfered``, ``other_cpu_cores``, ``reason``;
  :func:`deep500.report.records.flags`);
- the telemetry series, except at level 3 (the per-rank telemetry figures).

Dictionary keys and short strings are then shared between records (one object per
distinct text), which halves what the rest costs.
"""
from __future__ import annotations

import contextlib
import gc

from deep500.results.files import iter_checked_records

_TELEMETRY_SHOWN = ("interfered", "other_cpu_cores", "reason")
_SAMPLES_SHOWN = ("TrajectoryDivergence",)
_SAMPLES_THINNED = ("WallclockTime",)
# A violin or histogram of 33 quantiles (every 3.125%) is the distribution's shape;
# 10^5 raw samples per record would be what no report can hold at 100k records.
SAMPLES_KEPT = 33
_SHARED_TEXT = 48  # strings up to this length are shared: keys, names, units, labels


def slim(record: dict) -> dict:
    """``record`` without what no report section reads (see the module docstring)."""
    record.pop("threads", None)
    telemetry = record.get("telemetry")
    if isinstance(telemetry, dict):
        record["telemetry"] = {k: telemetry[k] for k in _TELEMETRY_SHOWN if k in telemetry}
    if record.get("level") != 3:
        record.pop("telemetry_series", None)
    result = record.get("result")
    if isinstance(result, dict):
        result.pop("conditions", None)
        for entry in result.get("metrics") or ():
            if isinstance(entry, dict):
                entry.pop("conditions", None)
                if entry.get("metric") in _SAMPLES_THINNED:
                    entry["samples"] = thinned(entry.get("samples"))
                elif entry.get("metric") not in _SAMPLES_SHOWN and not _step_samples(entry):
                    entry.pop("samples", None)
    return record


def thinned(samples, keep: int = SAMPLES_KEPT) -> list[float]:
    """``samples`` (numbers) sorted, or ``keep`` evenly spaced quantiles of them (the
    smallest and largest included) where there are more; [] for anything else."""
    if not isinstance(samples, list) or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) for s in samples):
        return []
    if len(samples) <= keep:
        return sorted(samples)
    ordered = sorted(samples)
    last = len(ordered) - 1
    # linear interpolation between order statistics (NumPy's default quantile rule)
    points = [last * i / (keep - 1) for i in range(keep)]
    return [ordered[int(p)] + (ordered[min(int(p) + 1, last)] - ordered[int(p)])
            * (p - int(p)) for p in points]


def _step_samples(entry: dict) -> bool:
    """Whether ``entry`` is a ``TrainingAccuracy`` sampled every k steps."""
    summary = entry.get("summary")
    return entry.get("metric") == "TrainingAccuracy" and isinstance(summary, dict) \
        and bool(summary.get("every"))


def share(value, table: dict):
    """``value`` rebuilt with its keys and short strings taken from ``table`` (added
    where new), so equal texts across records are one object."""
    kind = value.__class__
    if kind is dict:
        return {table.setdefault(k, k): share(v, table) for k, v in value.items()}
    if kind is list:  # a list of numbers (a shape, a curve) is kept as it is
        return [share(v, table) for v in value] if any(
            v.__class__ in (dict, list, str) for v in value) else value
    if kind is str and len(value) <= _SHARED_TEXT:
        return table.setdefault(value, value)
    return value


def report_records(output_dir: str) -> list[dict]:
    """Every record of the run in ``output_dir`` as the report sections read them
    (slimmed and shared, in the order written). Raises RunFolderError when a line other
    than a last one cut off by a crash is not a record."""
    table: dict = {}
    records = []
    # Only lists and dicts that live on are made here: the cycle collector would walk
    # every record kept so far each few hundred allocations, for nothing.
    enabled = gc.isenabled()
    gc.disable()
    try:
        for record in iter_checked_records(output_dir):
            records.append(share(slim(record), table))
    finally:
        if enabled:
            gc.enable()
    return records


@contextlib.contextmanager
def records_kept_out_of_collection():
    """Within the block, the objects alive at its start (the records read) are left
    out of the cycle collector's full passes (``gc.freeze``), which would otherwise
    walk every record each time the sections' and matplotlib's allocations trigger
    one; they go back to the collector after it."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
