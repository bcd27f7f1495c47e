"""Level-3 section of a report: distributed training schemes compared — accuracy
against epochs and against time, time per epoch of the slowest rank, bytes each rank
sent and received per epoch (measured, and by the scheme's analytic model), where a
step's time goes (data loading, compute, communication, update), how far inconsistent
schemes' replicas drift apart, and staleness where a scheme measures it.

Every figure comes from rank 0's record, whose ``details["distributed"]`` holds every
rank's statistics and the global per-epoch figures
(:mod:`deep500.lv3_distributed.distributed_training`); the other ranks' records count
for acceptance (each rank's replica is tested).
"""
from __future__ import annotations

import os
import statistics as stats

from deep500.report.plots import grouped_bars, line_panels, stacked_bars
from deep500.report.records import measurement_warnings, of_level, summary, verdict
from deep500.report.tables import Table, fmt_number, fmt_time

# Phases in the order of a step (Deep500's schemes: compute, communication, update;
# PyTorch DDP: forward, backward_allreduce, update); others follow by name.
PHASE_ORDER = ("data loading", "compute", "forward", "backward", "backward_allreduce",
               "communication", "update")


def _label(record: dict) -> str:
    return record["configuration"]["scheme"]["label"]


def _distributed(record: dict) -> dict:
    return record.get("result", {}).get("details", {}).get("distributed") or {}


def _global_epochs(record: dict) -> list[dict]:
    return _distributed(record).get("epochs", [])


def _rank_epochs(record: dict) -> list[list[dict]]:
    """Per rank, its completed epochs."""
    return [[e for e in ranked.get("epochs", []) if e.get("completed", True)]
            for ranked in _distributed(record).get("ranks", [])]


def _median(values):
    values = [v for v in values if v is not None]
    return stats.median(values) if values else None


def _percent(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _bytes(value) -> str:
    if value is None:
        return "n/a"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def _training_seconds(record: dict) -> list[float]:
    """Per epoch: the slowest rank's time without its validation pass."""
    per_rank = _rank_epochs(record)
    epochs = min((len(r) for r in per_rank), default=0)
    return [max(r[i]["wall_time"] - (r[i].get("validation_time") or 0.0) for r in per_rank)
            for i in range(epochs)]


def _time_to_target(record: dict) -> str:
    target = summary(record, "TimeToAccuracy", "target")
    if target is None:
        return "not measured"
    elapsed = 0.0
    for index, epoch in enumerate(_global_epochs(record)):
        elapsed += epoch["wall_time"]
        if epoch.get("test_accuracy") is not None and epoch["test_accuracy"] >= target:
            return f"{fmt_time(elapsed)} (epoch {index + 1}, target {target:.0%})"
    return f"not reached ({target:.0%})"


def _acceptance(record: dict, others: list[dict]) -> str:
    failing = [r for r in [record, *others] if r.get("acceptance") and not r.get("passed")]
    if not failing:
        return verdict(record)
    return "; ".join(f"rank {r.get('rank', 0)}: {verdict(r)}" for r in failing)


def _bytes_per_epoch(record: dict, key: str) -> list:
    """Per rank: the mean over epochs of ``key`` (bytes_sent or bytes_received)."""
    epochs = _global_epochs(record)
    if not epochs:
        return []
    ranks = len(epochs[0].get(key, []))
    return [stats.mean(e[key][r] for e in epochs) for r in range(ranks)]


def _counted(record: dict, rank: int) -> str:
    epochs = _rank_epochs(record)[rank] if rank < len(_rank_epochs(record)) else []
    values = {(e.get("optimizer_measurements") or {}).get("counted") for e in epochs}
    values.discard(None)
    return ", ".join(sorted(values)) or "n/a"


def _phase_medians(record: dict) -> dict:
    """Median over epochs of each phase's seconds per epoch (mean over ranks; data
    loading: the slowest rank's)."""
    epochs = _global_epochs(record)
    out = {"data loading": _median(e.get("data_time") for e in epochs)}
    names = {n for e in epochs for n in (e.get("phase_times_mean") or {})}
    for name in _ordered(names):
        out[name] = _median((e.get("phase_times_mean") or {}).get(name) for e in epochs)
    return out


def _ordered(names) -> list[str]:
    known = [n for n in PHASE_ORDER if n in names]
    return known + sorted(set(names) - set(known))


def _drift_before_sync(record: dict) -> str:
    """Mean and max over all ranks' epochs of the scheme's own measurement of the
    divergence just before synchronising, or "n/a"."""
    measured = [e.get("optimizer_measurements") or {} for rank in _rank_epochs(record)
                for e in rank]
    means = [m["divergence_before_sync_mean"] for m in measured
             if m.get("divergence_before_sync_mean") is not None]
    highs = [m["divergence_before_sync_max"] for m in measured
             if m.get("divergence_before_sync_max") is not None]
    if not means:
        return "n/a"
    return f"{fmt_number(sum(means) / len(means))} / {fmt_number(max(highs))}"


def _divergence(epochs: list[dict]) -> list:
    """Per epoch: the largest replica divergence over ranks."""
    return [max((v for v in e.get("replica_divergence", []) if v is not None),
                default=None) for e in epochs]


def _staleness(record: dict) -> dict[int, int]:
    """Staleness histogram summed over ranks and epochs: ``optimizer_measurements
    ["staleness_histogram"]`` (or ``["staleness"]``) as ``{staleness: count}`` or a
    list of counts by staleness."""
    histogram: dict[int, int] = {}
    for epochs in _rank_epochs(record):
        for epoch in epochs:
            measured = epoch.get("optimizer_measurements") or {}
            value = measured.get("staleness_histogram", measured.get("staleness"))
            if isinstance(value, dict):
                items = value.items()
            elif isinstance(value, list):
                items = enumerate(value)
            else:
                continue
            for staleness, count in items:
                histogram[int(staleness)] = histogram.get(int(staleness), 0) + int(count)
    return histogram


def build(records: list[dict], output_dir: str) -> dict:
    measured_all = of_level(records, 3, "measurement")
    failed = of_level(records, 3, "error")
    measured = [r for r in measured_all if r.get("rank", 0) == 0]
    others = {}
    for record in measured_all:
        if record.get("rank", 0) != 0:
            others.setdefault(record["index"], []).append(record)
    sizes = sorted({r.get("size", 1) for r in measured})
    note = ("Every scheme trains the same ONNX model from the same initial weights on "
            "every rank; rank r takes its slice of each global minibatch of one seeded "
            "permutation (d5.DistributedSampler), so the global batch is ranks x local "
            "batch. Test accuracy is rank 0's replica, with the spread over all replicas; "
            "training accuracy is over all ranks' samples. Epoch time: the slowest rank's "
            "(validation included), median over epochs; time to target accumulates it.")
    if sizes == [1]:
        note += (" This run had 1 process: every scheme trained alone and nothing was "
                 "communicated. Compare schemes with 'deep500 run --np N RECIPE'.")
    table = Table("Level 3 — distributed training", [
        "Scheme", "Executor", "Ranks", "Consistent", "Final test acc. (rank 0)",
        "Replicas min–max", "Final train acc. (all ranks)", "Epoch time (slowest rank)",
        "Time to target", "Acceptance"], note=note)
    traffic = Table("Level 3 — bytes per rank per epoch, measured and analytic", [
        "Scheme", "Rank", "Sent (measured)", "Received (measured)", "Sent (model)",
        "Received (model)", "Measured / model", "Counted", "Model"], note=(
        "Measured: the bytes the scheme sent and received through d5.CommunicationNetwork, "
        "mean over epochs; 'exact' when Deep500 sent the messages itself, 'includes "
        "modelled' when MPI ran a collective whose bytes are the named algorithm's model. "
        "Model: the scheme's analytic_traffic for one epoch's steps. Deep500's own "
        "bookkeeping (gathering statistics, replica divergence) is not counted."))
    phase_names = _ordered({n for r in measured for n in _phase_medians(r)})
    phases = Table("Level 3 — where an epoch's time goes (median over epochs)", [
        "Scheme", *(n.replace("_", " + ").capitalize() for n in phase_names),
        "Communication share", "Steps per epoch", "Time per step"], note=(
        "Deep500's schemes: compute (new input, parameter preparation, forward and "
        "backpropagation), communication (the scheme's messages and waits), update (the "
        "update rule). PyTorch DDP overlaps its allreduces with backpropagation, so they "
        "are one phase there. Each phase is the mean over ranks of its seconds per "
        "epoch; data loading is the slowest rank's. Communication share: of the step "
        "phases."))
    divergence = Table("Level 3 — replica divergence", [
        "Scheme", "Consistent", "After the last epoch (max over ranks)",
        "Largest over epochs", "Before synchronising (mean / max)"], note=(
        "||w_r - mean_i w_i||_2 over all parameters at the end of each epoch, after the "
        "scheme's end-of-epoch work: zero when every rank holds the same model (schemes "
        "that synchronise the replicas as an epoch ends show zero). Before "
        "synchronising: where the scheme measures it (model averaging), the drift "
        "just before each synchronisation, over all epochs and ranks."))
    for record in measured:
        c, d = record["configuration"], _distributed(record)
        epochs = _global_epochs(record)
        last = epochs[-1] if epochs else {}
        low, high = last.get("test_accuracy_min"), last.get("test_accuracy_max")
        table.rows.append([
            _label(record), c.get("executor"), d.get("size", record.get("size", 1)),
            {True: "yes", False: "no"}.get(d.get("consistent"), "n/a"),
            _percent(last.get("test_accuracy")),
            "n/a" if low is None else f"{low:.1%} – {high:.1%}",
            _percent(last.get("train_accuracy")),
            fmt_time(_median(e.get("wall_time") for e in epochs)),
            _time_to_target(record), _acceptance(record, others.get(record["index"], []))])
        sent, received = (_bytes_per_epoch(record, "bytes_sent"),
                          _bytes_per_epoch(record, "bytes_received"))
        analytic = d.get("analytic_per_epoch") or []
        for rank, (s, r) in enumerate(zip(sent, received)):
            model = analytic[rank] if rank < len(analytic) else None
            model = model or {}
            ratio = (f"{s / model['bytes_sent']:.3f}" if model.get("bytes_sent")
                     else "n/a")
            traffic.rows.append([_label(record), rank, _bytes(s), _bytes(r),
                                 _bytes(model.get("bytes_sent")),
                                 _bytes(model.get("bytes_received")), ratio,
                                 _counted(record, rank), model.get("model", "none")])
        medians = _phase_medians(record)
        busy = sum(v or 0.0 for k, v in medians.items() if k != "data loading")
        communication = medians.get("communication")
        rank0 = _rank_epochs(record)[0] if _rank_epochs(record) else []
        per_step = _median(t for e in rank0 for t in e.get("step_times", []))
        phases.rows.append([_label(record), *(fmt_time(medians.get(n)) for n in phase_names),
                            _percent(communication / busy) if busy and
                            communication is not None else "n/a",
                            rank0[0].get("steps") if rank0 else "n/a", fmt_time(per_step)])
        drift = _divergence(epochs)
        if d.get("consistent") is False or any(drift):
            known = [v for v in drift if v is not None]
            divergence.rows.append([_label(record), "yes" if d.get("consistent") else "no",
                                    fmt_number(drift[-1] if drift else None),
                                    fmt_number(max(known) if known else None),
                                    _drift_before_sync(record)])
    tables = [t for t in (table, traffic, phases, divergence) if t.rows]
    if failed:
        tables.append(Table("Level 3 — configurations that failed",
                            ["Scheme", "Rank", "Error"],
                            [[_label(r), r.get("rank", 0), r["error"]] for r in failed]))
    plots = _plots(measured, output_dir) if measured else []
    return {"tables": tables, "plots": plots, "measured": len(measured),
            "failed": len({r["index"] for r in failed}),
            "warnings": measurement_warnings(measured, _label),
            "acceptance_failures": sum(1 for r in measured_all if not r.get("passed", True))}


def _plots(measured: list[dict], output_dir: str) -> list[tuple[str, str]]:
    folder = os.path.join(output_dir, "plots")
    plots = []
    with_epochs = [r for r in measured if _global_epochs(r)]
    if not with_epochs:
        return plots

    def per_epoch(key):
        return {_label(r): ([e["epoch"] + 1 for e in _global_epochs(r)],
                            [e.get(key) for e in _global_epochs(r)]) for r in with_epochs}
    path = line_panels(os.path.join(folder, "level3_accuracy_epochs.png"),
                       "Distributed training against epochs",
                       [("Test accuracy (rank 0)", "accuracy", per_epoch("test_accuracy")),
                        ("Training loss (all ranks)", "loss", per_epoch("train_loss"))],
                       xlabel="epoch", log_scale=(1,))
    plots.append(("Accuracy and loss against epochs, per scheme", path))
    against_time = {}
    for record in with_epochs:
        seconds, elapsed = [], 0.0
        for value in _training_seconds(record):
            elapsed += value
            seconds.append(elapsed)
        accuracy = [e.get("test_accuracy") for e in _global_epochs(record)][:len(seconds)]
        against_time[_label(record)] = (seconds, accuracy)
    path = line_panels(os.path.join(folder, "level3_accuracy_time.png"),
                       "Test accuracy (rank 0) against training time",
                       [("Training time of the slowest rank (validation excluded)",
                         "accuracy", against_time)], xlabel="seconds")
    plots.append(("Accuracy against time, per scheme", path))
    labels = [_label(r) for r in with_epochs]
    medians = [_phase_medians(r) for r in with_epochs]
    path = stacked_bars(os.path.join(folder, "level3_phases.png"),
                        "Where an epoch's time goes (mean over ranks)", labels,
                        {name: [m.get(name) or 0.0 for m in medians]
                         for name in _ordered({n for m in medians for n in m})},
                        xlabel="seconds (median epoch)")
    plots.append(("Per-phase time of an epoch, per scheme", path))
    sent = [max(_bytes_per_epoch(r, "bytes_sent"), default=0) for r in with_epochs]
    model = [max((a or {}).get("bytes_sent", 0) or 0
                 for a in _distributed(r).get("analytic_per_epoch") or [None])
             for r in with_epochs]
    if any(sent) or any(model):
        path = grouped_bars(os.path.join(folder, "level3_bytes.png"),
                            "Bytes sent per epoch by the busiest rank", labels,
                            {"measured": [v / 1e6 for v in sent],
                             "analytic model": [v / 1e6 for v in model]}, xlabel="MB")
        plots.append(("Bytes sent per rank per epoch, measured and by the scheme's model",
                      path))
    drifting = {}
    for record in with_epochs:
        values = _divergence(_global_epochs(record))
        if any(values):
            drifting[_label(record)] = (list(range(1, len(values) + 1)), values)
    if drifting:
        path = line_panels(os.path.join(folder, "level3_divergence.png"),
                           "Replica divergence", [("Largest over ranks",
                                                   "‖w_r − mean w‖₂", drifting)],
                           xlabel="epoch", log_scale=(0,))
        plots.append(("How far replicas drift apart (inconsistent schemes)", path))
    histograms = {_label(r): _staleness(r) for r in with_epochs}
    histograms = {k: v for k, v in histograms.items() if v}
    if histograms:
        values = sorted({s for h in histograms.values() for s in h})
        path = grouped_bars(os.path.join(folder, "level3_staleness.png"),
                            "Staleness of applied updates (all ranks and epochs)",
                            [f"staleness {s}" for s in values],
                            {k: [h.get(s, 0) for s in values] for k, h in histograms.items()},
                            xlabel="updates")
        plots.append(("Staleness histogram", path))
    return plots
