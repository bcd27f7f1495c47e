"""A configuration measured under the telemetry sampler, and re-measured while the
sampler says other processes interfered (``deep500 run --remeasure-interfered N``).

Re-measuring is the remedy pyperf and asv leave to the user ("run it again on a quiet
machine"); here it is done for the rows that need it, and the attempts are kept.
"""
from __future__ import annotations

from typing import Any, Callable

from deep500.utils.errors import Deep500Error
from deep500.utils.telemetry import InterferenceRule, TelemetrySampler

SERIES_POINTS = 64  # time-series points kept in a record (decimated exactly)


def measure_watched(measure: Callable[[], Any], threads: int | None,
                    remeasure: int = 0, rule: InterferenceRule | None = None,
                    comm=None, interval_s: float = 0.05,
                    collective: bool = False) -> tuple[Any, dict]:
    """Run ``measure()`` with a :class:`TelemetrySampler` on; while the window is judged
    interfered, run it again, at most ``remeasure`` more times.

    Returns (result, fields for the record): ``telemetry`` (the kept attempt's summary),
    ``telemetry_series`` (its time series, at most 64 points), ``remeasured`` (how many
    extra attempts ran) and, after re-measuring, ``telemetry_attempts`` (the summaries
    of the attempts not kept, in the order measured). The kept attempt is the last one
    if it is clean, else the least interfered (fewest other processes' cores).

    Under MPI (``comm`` given) the ranks decide together, so that collective
    measurements stay matched: all re-measure when any rank was interfered and none
    failed, and all keep the same attempt (least interfered on its worst rank). An
    error in ``measure()`` stops re-measuring and is raised after the ranks agreed;
    except in a ``collective`` measurement, where the other ranks may wait inside the
    measurement for the failed one: there an error other than a Deep500Error (which
    every rank raises alike) is raised at once, for the runner to end the job.
    """
    if remeasure < 0:
        raise ValueError(f"remeasure must be >= 0, got {remeasure}")
    attempts: list[tuple[Any, TelemetrySampler, dict]] = []
    worst: list[float] = []  # per attempt: other processes' cores on the worst rank
    while True:
        sampler = TelemetrySampler(interval_s=interval_s, threads=threads, rule=rule,
                                   mpi_job=comm is not None)
        sampler.start()
        error = result = None
        try:
            result = measure()
        except Exception as exc:  # raised below, once the ranks agreed
            error = exc
        finally:
            summary = sampler.stop()
        if error is not None and collective and not isinstance(error, Deep500Error):
            raise error
        attempts.append((result, sampler, summary))
        vote = (error is not None, summary["interfered"], summary["other_cpu_cores"])
        votes = comm.allgather(vote) if comm is not None and remeasure else [vote]
        if error is not None:
            raise error
        failed = any(v[0] for v in votes)
        worst.append(max(v[2] for v in votes))
        if failed or not any(v[1] for v in votes) or len(attempts) > remeasure:
            break
    clean = not any(v[1] for v in votes)
    keep = len(attempts) - 1 if clean else min(range(len(attempts)), key=worst.__getitem__)
    result, sampler, summary = attempts[keep]
    fields = {"telemetry": summary, "telemetry_series": sampler.series(SERIES_POINTS),
              "remeasured": len(attempts) - 1}
    if len(attempts) > 1:
        fields["telemetry_attempts"] = [a[2] for i, a in enumerate(attempts) if i != keep]
    return result, fields
