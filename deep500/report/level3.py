"""Level-3 section of a report: distributed training schemes compared — accuracy
against epochs and against time, time per epoch of the slowest rank, bytes each rank
sent and received per epoch (measured, and by the scheme's analytic model), where a
step's time goes (data loading, compute, communication, update), how far inconsistent
schemes' replicas drift apart, and staleness where a scheme measures it.

Every figure comes from rank 0's record, whose ``details["distributed"]`` holds every
rank's statistics and the global per-epoch figures
(:mod:`deep500.lv3_distributed.distributed_training`); the other ranks' records count
for acceptance (each rank's replica is tested). Each rank's record also carries its
telemetry series: per configuration a figure of CPU %, RSS, threads, context switches
and bytes per second per rank over time (:mod:`deep500.report.telemetry_plots`).
"""
from __future__ import annotations

import json
import os
import statistics as stats

from deep500.report.plots import grouped_bars, line_panels, stacked_bars
from deep500.report.records import ReportContext, Settings, distinct_labels, flags, \
    measurement_warnings, of_level, summary, verdict
from deep500.report.seeds import fmt_mean_ci, mean_curve, seed_groups, seeds_text, \
    time_to_target_plot, time_to_target_text
from deep500.report.tables import Table, fmt_number, fmt_time
from deep500.report.telemetry_plots import telemetry_plots

SHOWN = ("scheme", "executor")

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


def _seconds_to_target(record: dict) -> tuple:
    """(seconds, epochs) until rank 0's test accuracy first reached the target, the
    slowest rank's epoch times (validation included) summed; (None, None) if never."""
    target = summary(record, "TimeToAccuracy", "target")
    elapsed = 0.0
    for index, epoch in enumerate(_global_epochs(record)):
        elapsed += epoch["wall_time"]
        if (target is not None and epoch.get("test_accuracy") is not None
                and epoch["test_accuracy"] >= target):
            return elapsed, index + 1
    return None, None


def _time_to_target(group: list[dict]) -> str:
    target = summary(group[0], "TimeToAccuracy", "target")
    if target is None:
        return "not measured"
    if len(group) == 1:
        seconds, epochs = _seconds_to_target(group[0])
        if seconds is None:
            return f"not reached ({target:.0%})"
        return f"{fmt_time(seconds)} (epoch {epochs}, target {target:.0%})"
    return time_to_target_text([_seconds_to_target(r)[0] for r in group], target)


def _epoch_spread(records: list[dict]) -> str:
    """``min / median / max`` over epochs of the slowest rank's epoch time."""
    times = [e["wall_time"] for r in records for e in _global_epochs(r)
             if e.get("wall_time") is not None]
    if not times:
        return "n/a"
    return (f"{fmt_time(min(times))} / {fmt_time(stats.median(times))} / "
            f"{fmt_time(max(times))}")


def _mean_cell(group: list[dict], values: list) -> str:
    """One run's accuracy, or the mean ± 95% CI half-width over the seeds."""
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return _percent(values[0]) if len(group) == 1 else fmt_mean_ci(values, _percent)


def _group_flags(group: list[dict], others: dict, threshold: float) -> str:
    """Every rank's flags (interference on any rank matters: the slowest sets the
    pace), by seed when there are several."""
    shown = []
    for record in group:
        for ranked in [record, *others.get(record["index"], [])]:
            text = flags(ranked, threshold)
            if text == "—":
                continue
            where = f"rank {ranked.get('rank', 0)}" + (
                f", seed {record['configuration'].get('seed')}" if len(group) > 1 else "")
            shown.append(f"{where}: {text}")
    return "; ".join(shown) or "—"


def _group_acceptance(group: list[dict], others: dict) -> str:
    if len(group) == 1:
        return _acceptance(group[0], others.get(group[0]["index"], []))
    verdicts = [(r, _acceptance(r, others.get(r["index"], []))) for r in group]
    failing = [f"seed {r['configuration'].get('seed')}: {v}" for r, v in verdicts
               if v not in ("pass", "—")]
    if failing:
        return "; ".join(failing)
    return "pass" if any(v == "pass" for _, v in verdicts) else "—"


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


def _exposed_communication(record: dict):
    """Median over epochs of the largest ``exposed_communication`` over the ranks
    (seconds per step: step time minus compute-only time; ``DistributedOptimizer``),
    or ``None`` where the scheme does not measure it."""
    per_rank = _rank_epochs(record)
    count = min((len(epochs) for epochs in per_rank), default=0)
    values = []
    for index in range(count):
        ranks = [(epochs[index].get("optimizer_measurements") or {})
                 .get("exposed_communication") for epochs in per_rank]
        ranks = [v for v in ranks if v is not None]
        if ranks:
            values.append(max(ranks))
    return _median(values)


def _signed_time(seconds) -> str:
    """``fmt_time`` that keeps a sign (an exposed time measured below zero is noise
    the reader should see)."""
    if seconds is None or seconds >= 0:
        return fmt_time(seconds)
    return "-" + fmt_time(-seconds)


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


def _comm_dtype(record: dict) -> str:
    return record["configuration"]["scheme"].get("comm_dtype") or "float32"


def _without_comm_dtype(record: dict) -> str:
    """The configuration but for its wire dtype (and the label naming it)."""
    configuration = dict(record["configuration"])
    configuration["scheme"] = {k: v for k, v in configuration["scheme"].items()
                               if k not in ("comm_dtype", "label")}
    return json.dumps(configuration, sort_keys=True, default=str)


def _largest_gap(record: dict, reference: dict, key: str):
    pairs = [(a.get(key), b.get(key)) for a, b in zip(_global_epochs(record),
                                                      _global_epochs(reference))]
    gaps = [abs(a - b) for a, b in pairs if a is not None and b is not None]
    return max(gaps) if gaps else None


def compressed_rows(measured: list[dict], head) -> list[list]:
    """One row per configuration with a 16-bit ``comm_dtype`` whose float32 twin (the
    same configuration with ``comm_dtype`` float32) was measured: final test accuracy
    of both, bytes sent by rank 0 per epoch against float32's, and how far the
    per-epoch trajectory moved from float32's (largest gap of the training loss and
    of the test accuracy over the epochs)."""
    twins = {_without_comm_dtype(r): r for r in measured if _comm_dtype(r) == "float32"}
    rows = []
    for record in measured:
        reference = twins.get(_without_comm_dtype(record))
        if _comm_dtype(record) == "float32" or reference is None:
            continue
        last, first = (_global_epochs(record) or [{}])[-1], \
            (_global_epochs(reference) or [{}])[-1]
        sent = _bytes_per_epoch(record, "bytes_sent")
        sent32 = _bytes_per_epoch(reference, "bytes_sent")
        ratio = f"{sent[0] / sent32[0]:.3f}" if sent and sent32 and sent32[0] else "n/a"
        rows.append([*head(record), _comm_dtype(record),
                     _percent(last.get("test_accuracy")),
                     _percent(first.get("test_accuracy")), ratio,
                     fmt_number(_largest_gap(record, reference, "train_loss")),
                     _percent(_largest_gap(record, reference, "test_accuracy"))])
    return rows


def build(records: list[dict], output_dir: str, context: ReportContext | None = None) -> dict:
    context = context or ReportContext({})
    measured_all = of_level(records, 3, "measurement")
    failed = of_level(records, 3, "error")
    measured = [r for r in measured_all if r.get("rank", 0) == 0]
    others = {}
    for record in measured_all:
        if record.get("rank", 0) != 0:
            others.setdefault(record["index"], []).append(record)
    aggregated = () if context.per_seed else ("seed",)
    settings = Settings(measured_all + failed, SHOWN, context.manifest,
                        aggregated=aggregated)
    labels = distinct_labels(measured_all + failed, _label, lambda r: (
        f"{_label(r)}|{r['configuration'].get('executor')}|{settings.text(r)}"),
        without=aggregated)
    groups = seed_groups(measured, context.per_seed)
    with_seeds = any(len(g) > 1 for g in groups)

    def head(record, group=None):
        return ([labels[id(record)]] + ([settings.text(record)] if settings else []) +
                ([seeds_text(group or [record])] if with_seeds else []))
    heads = ["Scheme"] + (["Settings"] if settings else []) + (["Seed shown"] if with_seeds
                                                                else [])
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
    if with_seeds:
        note += (" Runs that differ only in their seed make one row: accuracies are the "
                 "mean ± the half-width of a Student-t 95% CI over the seeds, time to "
                 "target the mean over the runs that reached it with how many did, and "
                 "MLPerf Training's score from 3 runs on; the tables below show the "
                 "lowest seed. One row per seed: deep500 report DIR --per-seed.")
    table = Table("Level 3 — distributed training", [
        "Scheme", "Executor", *(["Settings"] if settings else []),
        *(["Seeds"] if with_seeds else []), "Ranks", "Consistent",
        "Final test acc. (rank 0)", "Replicas min–max", "Final train acc. (all ranks)",
        "Epoch time, slowest rank (min / median / max)", "Time to target", "Flags",
        "Acceptance"], note=note)
    traffic = Table("Level 3 — bytes per rank per epoch, measured and analytic", [
        *heads, "Rank", "Sent (measured)", "Received (measured)", "Sent (model)",
        "Received (model)", "Measured / model", "Counted", "Model"], note=(
        "Measured: the bytes the scheme sent and received through d5.CommunicationNetwork, "
        "mean over epochs; 'exact' when Deep500 sent the messages itself, 'includes "
        "modelled' when MPI ran a collective whose bytes are the named algorithm's model. "
        "Model: the scheme's analytic_traffic for one epoch's steps. Deep500's own "
        "bookkeeping (gathering statistics, replica divergence) is not counted."))
    phase_names = _ordered({n for r in measured for n in _phase_medians(r)})
    phases = Table("Level 3 — where an epoch's time goes (median over epochs)", [
        *heads, *(n.replace("_", " + ").capitalize() for n in phase_names),
        "Communication share", "Steps per epoch", "Time per step",
        "Exposed communication per step"], note=(
        "Deep500's schemes: compute (new input, parameter preparation, forward and "
        "backpropagation), communication (the scheme's messages and waits), update (the "
        "update rule). PyTorch DDP overlaps its allreduces with backpropagation, so they "
        "are one phase there. Each phase is the mean over ranks of its seconds per "
        "epoch; data loading is the slowest rank's. Communication share: of the step "
        "phases. Exposed communication per step: the median step time (forward to "
        "averaged gradients) minus the median compute-only time, as the Intel MPI "
        "Benchmarks' non-blocking tests measure it; the largest over the ranks, "
        "median over epochs; compare a scheme with overlap=True with its blocking "
        "twin."))
    divergence = Table("Level 3 — replica divergence", [
        *heads, "Consistent", "After the last epoch (max over ranks)",
        "Largest over epochs", "Before synchronising (mean / max)"], note=(
        "||w_r - mean_i w_i||_2 over all parameters at the end of each epoch, after the "
        "scheme's end-of-epoch work: zero when every rank holds the same model (schemes "
        "that synchronise the replicas as an epoch ends show zero). Before "
        "synchronising: where the scheme measures it (model averaging), the drift "
        "just before each synchronisation, over all epochs and ranks."))
    for group in groups:
        record = group[0]
        c, d = record["configuration"], _distributed(record)
        lasts = [(_global_epochs(r) or [{}])[-1] for r in group]
        lows = [e.get("test_accuracy_min") for e in lasts if e.get("test_accuracy_min")
                is not None]
        highs = [e.get("test_accuracy_max") for e in lasts if e.get("test_accuracy_max")
                 is not None]
        table.rows.append([
            labels[id(record)], c.get("executor"), *head(record, group)[1:],
            d.get("size", record.get("size", 1)),
            {True: "yes", False: "no"}.get(d.get("consistent"), "n/a"),
            _mean_cell(group, [e.get("test_accuracy") for e in lasts]),
            "n/a" if not lows else f"{min(lows):.1%} – {max(highs):.1%}",
            _mean_cell(group, [e.get("train_accuracy") for e in lasts]),
            _epoch_spread(group), _time_to_target(group),
            _group_flags(group, others, context.ci_threshold),
            _group_acceptance(group, others)])
        epochs = _global_epochs(record)
        sent, received = (_bytes_per_epoch(record, "bytes_sent"),
                          _bytes_per_epoch(record, "bytes_received"))
        analytic = d.get("analytic_per_epoch") or []
        for rank, (s, r) in enumerate(zip(sent, received)):
            model = analytic[rank] if rank < len(analytic) else None
            model = model or {}
            ratio = (f"{s / model['bytes_sent']:.3f}" if model.get("bytes_sent")
                     else "n/a")
            traffic.rows.append([*head(record), rank, _bytes(s), _bytes(r),
                                 _bytes(model.get("bytes_sent")),
                                 _bytes(model.get("bytes_received")), ratio,
                                 _counted(record, rank), model.get("model", "none")])
        medians = _phase_medians(record)
        busy = sum(v or 0.0 for k, v in medians.items() if k != "data loading")
        communication = medians.get("communication")
        rank0 = _rank_epochs(record)[0] if _rank_epochs(record) else []
        per_step = _median(t for e in rank0 for t in e.get("step_times", []))
        phases.rows.append([*head(record),
                            *(fmt_time(medians.get(n)) for n in phase_names),
                            _percent(communication / busy) if busy and
                            communication is not None else "n/a",
                            rank0[0].get("steps") if rank0 else "n/a", fmt_time(per_step),
                            _signed_time(_exposed_communication(record))])
        drift = _divergence(epochs)
        if d.get("consistent") is False or any(drift):
            known = [v for v in drift if v is not None]
            divergence.rows.append([*head(record),
                                    "yes" if d.get("consistent") else "no",
                                    fmt_number(drift[-1] if drift else None),
                                    fmt_number(max(known) if known else None),
                                    _drift_before_sync(record)])
    compressed = Table("Level 3 — compressed communication against float32", [
        *heads, "Wire dtype", "Final test acc.", "Final test acc. (float32)",
        "Bytes sent / float32's (rank 0)", "Largest train-loss gap over epochs",
        "Largest test-acc. gap over epochs"], compressed_rows(measured, head), note=(
        "The same configuration with comm_dtype float16 or bfloat16 (16 bits on the "
        "wire, float32 arithmetic) next to its float32 run: the trajectory's divergence "
        "is the largest difference, over the epochs, of the training loss and of rank "
        "0's test accuracy."))
    tables = [t for t in (table, traffic, phases, compressed, divergence) if t.rows]
    if failed:
        tables.append(Table("Level 3 — configurations that failed",
                            ["Scheme", *(["Settings"] if settings else []), "Seed", "Rank",
                             "Error"],
                            [[labels[id(r)], *([settings.text(r)] if settings else []),
                              r["configuration"].get("seed"), r.get("rank", 0), r["error"]]
                             for r in failed]))
    plots = _plots(groups, output_dir, settings, labels, context) if measured else []
    plots += telemetry_plots(measured_all, output_dir, lambda r: settings.label(
        labels[id(r)], r) + (f" (seed {r['configuration'].get('seed')})"
                             if with_seeds else ""), context.figure_format)
    return {"tables": tables, "plots": plots, "measured": len(measured),
            "failed": len({r["index"] for r in failed}),
            "warnings": measurement_warnings(
                measured, lambda r: settings.label(labels[id(r)], r) + (
                    f" (seed {r['configuration'].get('seed')})" if with_seeds else "")),
            "acceptance_failures": sum(1 for r in measured_all if not r.get("passed", True))}


def _plots(groups: list[list[dict]], output_dir: str, settings: Settings, labels: dict,
           context: ReportContext) -> list[tuple[str, str]]:
    """One series per row of the main table (scheme and every other varied setting);
    runs of several seeds are drawn as their mean, shaded from the lowest to the
    highest seed's value; bar charts show the lowest seed."""
    folder = os.path.join(output_dir, "plots")
    also = context.figure_format
    plots = []
    groups = [g for g in groups if _global_epochs(g[0])]
    if not groups:
        return plots
    names = {id(g[0]): settings.label(labels[id(g[0])], g[0]) + (
        f" (mean of {len(g)} seeds)" if len(g) > 1 else "") for g in groups}

    def per_epoch(key):
        series, bands = {}, {}
        for group in groups:
            means, lows, highs = mean_curve([[e.get(key) for e in _global_epochs(r)]
                                              for r in group])
            series[names[id(group[0])]] = (list(range(1, len(means) + 1)), means)
            if len(group) > 1:
                bands[names[id(group[0])]] = (lows, highs)
        return series, bands
    accuracy, accuracy_band = per_epoch("test_accuracy")
    loss, loss_band = per_epoch("train_loss")
    path = line_panels(os.path.join(folder, "level3_accuracy_epochs.png"),
                       "Distributed training against epochs",
                       [("Test accuracy (rank 0)", "accuracy", accuracy),
                        ("Training loss (all ranks)", "loss", loss)],
                       xlabel="epoch", log_scale=(1,), also=also,
                       bands=[accuracy_band, loss_band])
    plots.append(("Accuracy and loss against epochs, per scheme", path))
    against_time = {}
    for group in groups:
        elapsed_curves, accuracy_curves = [], []
        for record in group:
            seconds, elapsed = [], 0.0
            for value in _training_seconds(record):
                elapsed += value
                seconds.append(elapsed)
            elapsed_curves.append(seconds)
            accuracy_curves.append([e.get("test_accuracy")
                                    for e in _global_epochs(record)][:len(seconds)])
        xs, _, _ = mean_curve(elapsed_curves)
        ys, _, _ = mean_curve(accuracy_curves)
        against_time[names[id(group[0])]] = (xs, ys[:len(xs)])
    path = line_panels(os.path.join(folder, "level3_accuracy_time.png"),
                       "Test accuracy (rank 0) against training time",
                       [("Training time of the slowest rank (validation excluded)",
                         "accuracy", against_time)], xlabel="seconds", also=also)
    plots.append(("Accuracy against time, per scheme", path))
    reaching = [(g, [t for t in (_seconds_to_target(r)[0] for r in g) if t is not None])
                for g in groups]
    reaching = [(g, times) for g, times in reaching if times]
    if reaching:
        plots.append(time_to_target_plot(
            os.path.join(folder, "level3_time_to_target.png"),
            [settings.label(labels[id(g[0])], g[0]) for g, _ in reaching],
            [times for _, times in reaching], [len(g) for g, _ in reaching],
            summary(reaching[0][0][0], "TimeToAccuracy", "target"), also))
    with_epochs = [g[0] for g in groups]
    bars = [settings.label(labels[id(r)], r) for r in with_epochs]
    medians = [_phase_medians(r) for r in with_epochs]
    path = stacked_bars(os.path.join(folder, "level3_phases.png"),
                        "Where an epoch's time goes (mean over ranks)", bars,
                        {name: [m.get(name) or 0.0 for m in medians]
                         for name in _ordered({n for m in medians for n in m})},
                        xlabel="seconds (median epoch)", also=also)
    plots.append(("Per-phase time of an epoch, per scheme", path))
    sent = [max(_bytes_per_epoch(r, "bytes_sent"), default=0) for r in with_epochs]
    model = [max((a or {}).get("bytes_sent", 0) or 0
                 for a in _distributed(r).get("analytic_per_epoch") or [None])
             for r in with_epochs]
    if any(sent) or any(model):
        path = grouped_bars(os.path.join(folder, "level3_bytes.png"),
                            "Bytes sent per epoch by the busiest rank", bars,
                            {"measured": [v / 1e6 for v in sent],
                             "analytic model": [v / 1e6 for v in model]}, xlabel="MB",
                            also=also)
        plots.append(("Bytes sent per rank per epoch, measured and by the scheme's model",
                      path))
    drifting = {}
    for record, name in zip(with_epochs, bars):
        values = _divergence(_global_epochs(record))
        if any(values):
            drifting[name] = (list(range(1, len(values) + 1)), values)
    if drifting:
        path = line_panels(os.path.join(folder, "level3_divergence.png"),
                           "Replica divergence", [("Largest over ranks",
                                                   "‖w_r − mean w‖₂", drifting)],
                           xlabel="epoch", log_scale=(0,), also=also)
        plots.append(("How far replicas drift apart (inconsistent schemes)", path))
    histograms = {name: _staleness(r) for r, name in zip(with_epochs, bars)}
    histograms = {k: v for k, v in histograms.items() if v}
    if histograms:
        values = sorted({s for h in histograms.values() for s in h})
        path = grouped_bars(os.path.join(folder, "level3_staleness.png"),
                            "Staleness of applied updates (all ranks and epochs)",
                            [f"staleness {s}" for s in values],
                            {k: [h.get(s, 0) for s in values] for k, h in histograms.items()},
                            xlabel="updates", also=also)
        plots.append(("Staleness histogram", path))
    return plots
