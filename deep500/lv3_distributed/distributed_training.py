"""Per-rank and global figures of a distributed training run.

Each rank trains with its own :class:`~deep500.lv2_training.trainer.Trainer` and
measures its own :class:`TrainingStatistics` (its epochs' times, its shard's training
loss and accuracy, the test accuracy of its replica, and in
``optimizer_measurements`` its per-phase times and bytes communicated). :func:`summarize`
gathers them at rank 0 and derives the global figures a reader compares schemes by:

* epoch time: the slowest rank's (the run is as fast as its slowest rank);
* training loss and accuracy: over all ranks' samples (sample-weighted means);
* test accuracy: rank 0's replica, and the spread over replicas (for inconsistent
  schemes they differ);
* bytes per rank: each rank's sent and received bytes, and their maximum;
* phase times: the mean over ranks of each phase, and the maximum.

The statistics dictionaries travel pickled over the raw communicator: this is
Deep500's bookkeeping, not counted as the scheme's traffic.
"""
from __future__ import annotations

from deep500.lv2_training.training_statistics import TrainingStatistics


def summarize(optimizer, statistics: TrainingStatistics, root: int = 0) -> dict | None:
    """Gather every rank's ``statistics`` at ``root`` and return
    ``{"ranks": [per-rank statistics dicts], "epochs": [global per-epoch figures],
    "scheme", "size"}`` there (``None`` on other ranks). Collective."""
    gathered = optimizer.comm.comm.gather(statistics.to_dict(), root=root)
    if optimizer.comm.rank != root:
        return None
    return {"scheme": optimizer.name, "size": optimizer.size,
            "consistent": optimizer.consistent,
            "ranks": gathered, "epochs": global_epochs(gathered)}


def global_epochs(per_rank: list[dict]) -> list[dict]:
    """Global figures per epoch from the ranks' ``TrainingStatistics.to_dict()``."""
    epochs = min(len(stats["epochs"]) for stats in per_rank)
    out = []
    for index in range(epochs):
        records = [stats["epochs"][index] for stats in per_rank]
        samples = sum(r["samples"] for r in records)
        measured = [r.get("optimizer_measurements") or {} for r in records]
        test = [r["test_accuracy"] for r in records if r["test_accuracy"] is not None]
        phases = [m.get("phase_times", {}) for m in measured]
        names = sorted({name for p in phases for name in p})
        out.append({
            "epoch": index,
            "wall_time": max(r["wall_time"] for r in records),
            "step_time": max(r["step_time"] for r in records),
            "data_time": max(r["data_time"] for r in records),
            "samples": samples,
            "train_loss": _weighted(records, "train_loss"),
            "train_accuracy": _weighted(records, "train_accuracy"),
            "test_accuracy": records[0]["test_accuracy"],
            "test_accuracy_min": min(test) if test else None,
            "test_accuracy_max": max(test) if test else None,
            "bytes_sent": [m.get("bytes_sent", 0) for m in measured],
            "bytes_received": [m.get("bytes_received", 0) for m in measured],
            "max_bytes_sent": max(m.get("bytes_sent", 0) for m in measured),
            "replica_divergence": [m.get("replica_divergence") for m in measured],
            "phase_times_mean": {n: sum(p.get(n, 0.0) for p in phases) / len(phases)
                                 for n in names},
            "phase_times_max": {n: max(p.get(n, 0.0) for p in phases) for n in names},
        })
    return out


def _weighted(records: list[dict], key: str) -> float | None:
    pairs = [(r[key], r["samples"]) for r in records if r[key] is not None]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else None


def synchronous_step_times(per_rank: list[dict], skip_steps: int = 1) -> list[float]:
    """The time of every training step of a synchronous scheme: per step, the slowest
    rank's ``optimizer.step`` time (a step is done when every rank's is), over all
    epochs, leaving out each rank's first ``skip_steps`` steps (allocation of buffers,
    caches warming). ``per_rank``: the ranks' ``TrainingStatistics.to_dict()``; ranks
    of a synchronous scheme take the same number of steps."""
    series = []
    for stats in per_rank:
        steps = [t for epoch in stats["epochs"] for t in epoch.get("step_times", [])]
        series.append(steps[skip_steps:])
    count = min((len(s) for s in series), default=0)
    return [max(s[i] for s in series) for i in range(count)]
