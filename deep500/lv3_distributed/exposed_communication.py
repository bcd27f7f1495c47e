"""Exposed communication of a synchronous data-parallel step, over every rank.

Each rank measures its median step time and its median compute-only time
(``DistributedOptimizer.exposed_measurements``). A synchronous step cannot end before
its slowest rank's compute, so what communication adds to the step is the step time
beyond that: ``max over ranks of the step median - max over ranks of the
compute-only median``. A rank's own difference also counts the time it waits for a
slower rank (load imbalance, a straggler) as communication: on two ranks sharing two
cores with the kernel's TCP work, the faster rank's figure doubled in some rounds
(docs/cluster_emulation.md). Overlap hides communication, not imbalance (IMB-NBC's
overlap is measured against the pure compute time; Intel MPI Benchmarks User Guide,
"IMB-NBC").
"""
from __future__ import annotations


def exposed_over_ranks(per_rank: list) -> float | None:
    """Seconds per step from each rank's ``exposed_measurements`` (None entries are
    ranks that did not measure): the step beyond the slowest rank's compute, or the
    largest per-rank ``exposed_communication`` where a rank lacks the medians (records
    written before these were stored), or None."""
    measured = [m for m in per_rank if m]
    if not measured:
        return None
    if all("step_seconds_median" in m and "compute_only_seconds_median" in m
           for m in measured):
        return (max(m["step_seconds_median"] for m in measured)
                - max(m["compute_only_seconds_median"] for m in measured))
    values = [m["exposed_communication"] for m in measured
              if m.get("exposed_communication") is not None]
    return max(values) if values else None
