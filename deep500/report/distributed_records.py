"""What the level-3 section and its plots read of a distributed training record:
rank 0's ``details["distributed"]`` holds every rank's epochs and the global per-epoch
figures (:mod:`deep500.lv3_distributed.distributed_training`)."""
from __future__ import annotations

import statistics as stats

from deep500.report.records import summary

# Phases in the order of a step (Deep500's schemes: compute, communication, update;
# PyTorch DDP: forward, backward_allreduce, update; TensorFlow's
# MultiWorkerMirroredStrategy: forward_backward, allreduce_update); others follow by name.
PHASE_ORDER = ("data loading", "compute", "forward", "backward", "forward_backward",
               "backward_allreduce", "communication", "allreduce_update", "update")


def scheme_label(record: dict) -> str:
    return record["configuration"]["scheme"]["label"]


def distributed(record: dict) -> dict:
    return record.get("result", {}).get("details", {}).get("distributed") or {}


def global_epochs(record: dict) -> list[dict]:
    return distributed(record).get("epochs", [])


def rank_epochs(record: dict) -> list[list[dict]]:
    """Per rank, its completed epochs."""
    return [[e for e in ranked.get("epochs", []) if e.get("completed", True)]
            for ranked in distributed(record).get("ranks", [])]


def median(values):
    values = [v for v in values if v is not None]
    return stats.median(values) if values else None


def training_seconds(record: dict) -> list[float]:
    """Per epoch: the slowest rank's time without its validation pass."""
    per_rank = rank_epochs(record)
    epochs = min((len(r) for r in per_rank), default=0)
    return [max(r[i]["wall_time"] - (r[i].get("validation_time") or 0.0) for r in per_rank)
            for i in range(epochs)]


def seconds_to_target(record: dict) -> tuple:
    """(seconds, epochs) until rank 0's test accuracy first reached the target, the
    slowest rank's epoch times (validation included) summed; (None, None) if never."""
    target = summary(record, "TimeToAccuracy", "target")
    elapsed = 0.0
    for index, epoch in enumerate(global_epochs(record)):
        elapsed += epoch["wall_time"]
        if (target is not None and epoch.get("test_accuracy") is not None
                and epoch["test_accuracy"] >= target):
            return elapsed, index + 1
    return None, None


def bytes_per_epoch(record: dict, key: str) -> list:
    """Per rank: the mean over epochs of ``key`` (bytes_sent or bytes_received)."""
    epochs = global_epochs(record)
    if not epochs:
        return []
    ranks = len(epochs[0].get(key, []))
    return [stats.mean(e[key][r] for e in epochs) for r in range(ranks)]


def ordered_phases(names) -> list[str]:
    """Phase names in the order of a step (``PHASE_ORDER``), others after by name."""
    known = [n for n in PHASE_ORDER if n in names]
    return known + sorted(set(names) - set(known))


def phase_medians(record: dict) -> dict:
    """Median over epochs of each phase's seconds per epoch (mean over ranks; data
    loading: the slowest rank's)."""
    epochs = global_epochs(record)
    out = {"data loading": median(e.get("data_time") for e in epochs)}
    names = {n for e in epochs for n in (e.get("phase_times_mean") or {})}
    for name in ordered_phases(names):
        out[name] = median((e.get("phase_times_mean") or {}).get(name) for e in epochs)
    return out


def replica_divergence(epochs: list[dict]) -> list:
    """Per epoch: the largest replica divergence over ranks."""
    return [max((v for v in e.get("replica_divergence", []) if v is not None),
                default=None) for e in epochs]


def staleness(record: dict) -> dict[int, int]:
    """Staleness histogram summed over ranks and epochs: ``optimizer_measurements
    ["staleness_histogram"]`` (or ``["staleness"]``) as ``{staleness: count}`` or a
    list of counts by staleness."""
    histogram: dict[int, int] = {}
    for epochs in rank_epochs(record):
        for epoch in epochs:
            measured = epoch.get("optimizer_measurements") or {}
            value = measured.get("staleness_histogram", measured.get("staleness"))
            if isinstance(value, dict):
                items = value.items()
            elif isinstance(value, list):
                items = enumerate(value)
            else:
                continue
            for updates_behind, count in items:
                key = int(updates_behind)
                histogram[key] = histogram.get(key, 0) + int(count)
    return histogram


def message_sizes(record: dict) -> dict:
    """Messages sent by size, summed over ranks and epochs: ``{bin: (messages, bytes)}``
    from each epoch's ``optimizer_measurements["message_sizes"]`` (power-of-two bins,
    :mod:`deep500.lv3_distributed.message_sizes`), with ``"unsized"`` for messages a
    model stated only in total; empty if the record has none."""
    histogram: dict = {}

    def add(key, messages, nbytes):
        counts = histogram.setdefault(key, [0, 0])
        counts[0] += int(messages)
        counts[1] += int(nbytes)
    for epochs in rank_epochs(record):
        for epoch in epochs:
            sizes = (epoch.get("optimizer_measurements") or {}).get("message_sizes")
            if not isinstance(sizes, dict):
                continue
            for row in sizes.get("bins") or []:
                add(int(row["bin"]), row["messages"], row["bytes"])
            if sizes.get("unsized_messages") or sizes.get("unsized_bytes"):
                add("unsized", sizes.get("unsized_messages") or 0,
                    sizes.get("unsized_bytes") or 0)
    return {key: tuple(counts) for key, counts in histogram.items()}
