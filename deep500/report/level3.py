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
and bytes per second per rank over time (:mod:`deep500.report.telemetry_plots`); the
section's other figures are :mod:`deep500.report.level3_plots`.
"""
from __future__ import annotations

import json
import statistics as stats

from deep500.lv3_distributed.exposed_communication import exposed_over_ranks
from deep500.report import level3_plots
from deep500.report.distributed_records import bytes_per_epoch, distributed, \
    global_epochs, median, ordered_phases, phase_medians, rank_epochs, \
    replica_divergence, scheme_label, seconds_to_target
from deep500.report.records import ReportContext, Settings, acceptance_failures, \
    distinct_labels, flags, measurement_warnings, of_level, summary, verdict
from deep500.report.seeds import fmt_mean_ci, seed_groups, seeds_text, time_to_target_text
from deep500.report.tables import Table, fmt_number, fmt_time
from deep500.report.pipeline_bubble import pipeline_table
from deep500.report.telemetry_plots import telemetry_plots
from deep500.report.timeline_links import timelines_table

SHOWN = ("scheme", "executor")


def _percent(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _bytes(value) -> str:
    if value is None:
        return "n/a"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def _time_to_target(group: list[dict]) -> str:
    target = summary(group[0], "TimeToAccuracy", "target")
    if target is None:
        return "not measured"
    if len(group) == 1:
        seconds, epochs = seconds_to_target(group[0])
        if seconds is None:
            return f"not reached ({target:.0%})"
        return f"{fmt_time(seconds)} (epoch {epochs}, target {target:.0%})"
    return time_to_target_text([seconds_to_target(r)[0] for r in group], target)


def _epoch_spread(records: list[dict]) -> str:
    """``min / median / max`` over epochs of the slowest rank's epoch time."""
    times = [e["wall_time"] for r in records for e in global_epochs(r)
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


NOT_OBSERVABLE = "not observable"


def _measured_bytes(value, counted: str) -> str:
    return NOT_OBSERVABLE if counted.startswith(NOT_OBSERVABLE) else _bytes(value)


def _counted(record: dict, rank: int) -> str:
    epochs = rank_epochs(record)[rank] if rank < len(rank_epochs(record)) else []
    values = {(e.get("optimizer_measurements") or {}).get("counted") for e in epochs}
    values.discard(None)
    return ", ".join(sorted(values)) or "n/a"


def _exposed_communication(record: dict):
    """Median over epochs of the exposed communication over the ranks (seconds per
    step: the slowest rank's step beyond the slowest rank's compute,
    ``exposed_over_ranks``), or ``None`` where the scheme does not measure it."""
    per_rank = rank_epochs(record)
    count = min((len(epochs) for epochs in per_rank), default=0)
    values = []
    for index in range(count):
        value = exposed_over_ranks([(epochs[index].get("optimizer_measurements") or {})
                                    for epochs in per_rank])
        if value is not None:
            values.append(value)
    return median(values)


def _signed_time(seconds) -> str:
    """``fmt_time`` that keeps a sign (an exposed time measured below zero is noise
    the reader should see)."""
    if seconds is None or seconds >= 0:
        return fmt_time(seconds)
    return "-" + fmt_time(-seconds)


def _drift_before_sync(record: dict) -> str:
    """Mean and max over all ranks' epochs of the scheme's own measurement of the
    divergence just before synchronising, or "n/a"."""
    measured = [e.get("optimizer_measurements") or {} for rank in rank_epochs(record)
                for e in rank]
    means = [m["divergence_before_sync_mean"] for m in measured
             if m.get("divergence_before_sync_mean") is not None]
    highs = [m["divergence_before_sync_max"] for m in measured
             if m.get("divergence_before_sync_max") is not None]
    if not means:
        return "n/a"
    return f"{fmt_number(sum(means) / len(means))} / {fmt_number(max(highs))}"


def _comm_dtype(record: dict) -> str:
    return record["configuration"]["scheme"].get("comm_dtype") or "float32"


def _without_comm_dtype(record: dict) -> str:
    """The configuration but for its wire dtype (and the label naming it)."""
    configuration = dict(record["configuration"])
    configuration["scheme"] = {k: v for k, v in configuration["scheme"].items()
                               if k not in ("comm_dtype", "label")}
    return json.dumps(configuration, sort_keys=True, default=str)


def _largest_gap(record: dict, reference: dict, key: str):
    pairs = [(a.get(key), b.get(key)) for a, b in zip(global_epochs(record),
                                                      global_epochs(reference))]
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
        last, first = (global_epochs(record) or [{}])[-1], \
            (global_epochs(reference) or [{}])[-1]
        sent = bytes_per_epoch(record, "bytes_sent")
        sent32 = bytes_per_epoch(reference, "bytes_sent")
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
    layout = _Layout(measured_all, failed, context)
    tables = _tables(layout, context)
    if failed:
        tables.append(_failed_table(layout, failed))
    plots = (level3_plots.plots(layout.groups, output_dir, layout.settings, layout.labels,
                                context) if layout.measured else [])
    plots += telemetry_plots(measured_all, output_dir, layout.series_name,
                             context.figure_format)
    return {"tables": tables, "plots": plots, "measured": len(layout.measured),
            "failed": len({r["index"] for r in failed}),
            "warnings": measurement_warnings(layout.measured, layout.series_name),
            "acceptance_failures": acceptance_failures(measured_all)}


class _Layout:
    """How the section's rows are made: rank 0's records grouped over their seeds
    (``groups``; the other ranks' records by configuration index in ``others``), the
    settings and scheme names that tell rows apart, and the columns the detail tables
    start with (scheme, settings, the seed shown)."""

    def __init__(self, measured_all: list[dict], failed: list[dict],
                 context: ReportContext):
        self.measured = [r for r in measured_all if r.get("rank", 0) == 0]
        self.others = {}
        for record in measured_all:
            if record.get("rank", 0) != 0:
                self.others.setdefault(record["index"], []).append(record)
        aggregated = () if context.per_seed else ("seed",)
        self.settings = Settings(measured_all + failed, SHOWN, context.manifest,
                                 aggregated=aggregated)
        self.labels = distinct_labels(measured_all + failed, scheme_label, lambda r: (
            f"{scheme_label(r)}|{r['configuration'].get('executor')}|"
            f"{self.settings.text(r)}"), without=aggregated)
        self.groups = seed_groups(self.measured, context.per_seed)
        self.with_seeds = any(len(g) > 1 for g in self.groups)
        self.heads = (["Scheme"] + (["Settings"] if self.settings else []) +
                      (["Seed shown"] if self.with_seeds else []))

    def head(self, record: dict, group: list[dict] | None = None) -> list:
        return ([self.labels[id(record)]] +
                ([self.settings.text(record)] if self.settings else []) +
                ([seeds_text(group or [record])] if self.with_seeds else []))

    def series_name(self, record: dict) -> str:
        """The record's name in plot legends and warnings."""
        return self.settings.label(self.labels[id(record)], record) + (
            f" (seed {record['configuration'].get('seed')})" if self.with_seeds else "")


def _tables(layout: _Layout, context: ReportContext) -> list[Table]:
    """The main table, bytes per rank, where an epoch's time goes, compressed
    communication, replica divergence and the timeline files, where each has rows."""
    table = _main_table(layout)
    traffic = _traffic_table(layout)
    phase_names = ordered_phases({n for r in layout.measured for n in phase_medians(r)})
    phases = _phases_table(layout, phase_names)
    divergence = _divergence_table(layout)
    for group in layout.groups:
        record = group[0]
        table.rows.append(_main_row(layout, group, context))
        traffic.rows += _traffic_rows(layout, record)
        phases.rows.append(_phases_row(layout, record, phase_names))
        row = _divergence_row(layout, record)
        if row is not None:
            divergence.rows.append(row)
    compressed = Table("Level 3 — compressed communication against float32", [
        *layout.heads, "Wire dtype", "Final test acc.", "Final test acc. (float32)",
        "Bytes sent / float32's (rank 0)", "Largest train-loss gap over epochs",
        "Largest test-acc. gap over epochs"], compressed_rows(layout.measured, layout.head),
        note=("The same configuration with comm_dtype float16 or bfloat16 (16 bits on "
              "the wire, float32 arithmetic) next to its float32 run: the trajectory's "
              "divergence is the largest difference, over the epochs, of the training "
              "loss and of rank 0's test accuracy."))
    timelines = timelines_table([g[0] for g in layout.groups], layout.heads, layout.head)
    pipelines = pipeline_table([g[0] for g in layout.groups], layout.heads, layout.head)
    return [t for t in (table, traffic, phases, compressed, divergence, pipelines,
                        timelines) if t.rows]


def _main_table(layout: _Layout) -> Table:
    sizes = sorted({r.get("size", 1) for r in layout.measured})
    note = ("Every scheme trains the same ONNX model from the same initial weights on "
            "every rank; rank r takes its slice of each global minibatch of one seeded "
            "permutation (d5.DistributedSampler), so the global batch is ranks x local "
            "batch. Test accuracy is rank 0's replica, with the spread over all replicas; "
            "training accuracy is over all ranks' samples. Epoch time: the slowest rank's "
            "(validation included), median over epochs; time to target accumulates it.")
    if sizes == [1]:
        note += (" This run had 1 process: every scheme trained alone and nothing was "
                 "communicated. Compare schemes with 'deep500 run --np N RECIPE'.")
    if layout.with_seeds:
        note += (" Runs that differ only in their seed make one row: accuracies are the "
                 "mean ± the half-width of a Student-t 95% CI over the seeds, time to "
                 "target the mean over the runs that reached it with how many did, and "
                 "MLPerf Training's score from 3 runs on; the tables below show the "
                 "lowest seed. One row per seed: deep500 report DIR --per-seed.")
    return Table("Level 3 — distributed training", [
        "Scheme", "Executor", *(["Settings"] if layout.settings else []),
        *(["Seeds"] if layout.with_seeds else []), "Ranks", "Consistent",
        "Final test acc. (rank 0)", "Replicas min–max", "Final train acc. (all ranks)",
        "Epoch time, slowest rank (min / median / max)", "Time to target", "Flags",
        "Acceptance"], note=note)


def _main_row(layout: _Layout, group: list[dict], context: ReportContext) -> list:
    record = group[0]
    c, d = record["configuration"], distributed(record)
    lasts = [(global_epochs(r) or [{}])[-1] for r in group]
    lows = [e.get("test_accuracy_min") for e in lasts if e.get("test_accuracy_min")
            is not None]
    highs = [e.get("test_accuracy_max") for e in lasts if e.get("test_accuracy_max")
             is not None]
    return [layout.labels[id(record)], c.get("executor"), *layout.head(record, group)[1:],
            d.get("size", record.get("size", 1)),
            {True: "yes", False: "no"}.get(d.get("consistent"), "n/a"),
            _mean_cell(group, [e.get("test_accuracy") for e in lasts]),
            "n/a" if not lows else f"{min(lows):.1%} – {max(highs):.1%}",
            _mean_cell(group, [e.get("train_accuracy") for e in lasts]),
            _epoch_spread(group), _time_to_target(group),
            _group_flags(group, layout.others, context.ci_threshold),
            _group_acceptance(group, layout.others)]


def _traffic_table(layout: _Layout) -> Table:
    return Table("Level 3 — bytes per rank per epoch, measured and analytic", [
        *layout.heads, "Rank", "Sent (measured)", "Received (measured)", "Sent (model)",
        "Received (model)", "Measured / model", "Counted", "Model"], note=(
        "Measured: the bytes the scheme sent and received through d5.CommunicationNetwork, "
        "mean over epochs; 'exact' when Deep500 sent the messages itself, 'includes "
        "modelled' when MPI ran a collective whose bytes are the named algorithm's model, "
        "'not observable' when the framework's collectives keep no byte counts "
        "(TensorFlow's). "
        "Model: the scheme's analytic_traffic for one epoch's steps. Deep500's own "
        "bookkeeping (gathering statistics, replica divergence) is not counted."))


def _traffic_rows(layout: _Layout, record: dict) -> list[list]:
    """Per rank: bytes sent and received per epoch, measured and by the model."""
    sent, received = (bytes_per_epoch(record, "bytes_sent"),
                      bytes_per_epoch(record, "bytes_received"))
    analytic = distributed(record).get("analytic_per_epoch") or []
    rows = []
    first_model = None
    for rank, (s, r) in enumerate(zip(sent, received)):
        model = analytic[rank] if rank < len(analytic) else None
        model = model or {}
        sentence = model.get("model", "none")
        if rank == 0:
            first_model = sentence
        elif sentence == first_model:
            sentence = "as rank 0"   # the model's sentence once per configuration
        ratio = (f"{s / model['bytes_sent']:.3f}" if model.get("bytes_sent")
                 else "n/a")
        counted = _counted(record, rank)
        if counted.startswith(NOT_OBSERVABLE):
            ratio = NOT_OBSERVABLE
        rows.append([*layout.head(record), rank, _measured_bytes(s, counted),
                     _measured_bytes(r, counted),
                     _bytes(model.get("bytes_sent")),
                     _bytes(model.get("bytes_received")), ratio,
                     counted, sentence])
    return rows


def _phases_table(layout: _Layout, phase_names: list[str]) -> Table:
    return Table("Level 3 — where an epoch's time goes (median over epochs)", [
        *layout.heads, *(n.replace("_", " + ").capitalize() for n in phase_names),
        "Communication share", "Steps per epoch", "Time per step",
        "Exposed communication per step"], note=(
        "Deep500's schemes: compute (new input, parameter preparation, forward and "
        "backpropagation), communication (the scheme's messages and waits), update (the "
        "update rule). PyTorch DDP overlaps its allreduces with backpropagation, so they "
        "are one phase there; TensorFlow's MultiWorkerMirroredStrategy all-reduces "
        "inside the Keras update, one phase with it. Each phase is the mean over ranks "
        "of its seconds per "
        "epoch; data loading is the slowest rank's. Communication share: of the step "
        "phases. Exposed communication per step: the median step time (forward to "
        "averaged gradients) minus the median compute-only time, as the Intel MPI "
        "Benchmarks' non-blocking tests measure it; the largest over the ranks, "
        "median over epochs; compare a scheme with overlap=True with its blocking "
        "twin."))


def _phases_row(layout: _Layout, record: dict, phase_names: list[str]) -> list:
    medians = phase_medians(record)
    busy = sum(v or 0.0 for k, v in medians.items() if k != "data loading")
    communication = medians.get("communication")
    rank0 = rank_epochs(record)[0] if rank_epochs(record) else []
    per_step = median(t for e in rank0 for t in e.get("step_times", []))
    return [*layout.head(record),
            *(fmt_time(medians.get(n)) for n in phase_names),
            _percent(communication / busy) if busy and communication is not None
            else "n/a",
            rank0[0].get("steps") if rank0 else "n/a", fmt_time(per_step),
            _signed_time(_exposed_communication(record))]


def _divergence_table(layout: _Layout) -> Table:
    return Table("Level 3 — replica divergence", [
        *layout.heads, "Consistent", "After the last epoch (max over ranks)",
        "Largest over epochs", "Before synchronising (mean / max)"], note=(
        "||w_r - mean_i w_i||_2 over all parameters at the end of each epoch, after the "
        "scheme's end-of-epoch work: zero when every rank holds the same model (schemes "
        "that synchronise the replicas as an epoch ends show zero). Before "
        "synchronising: where the scheme measures it (model averaging), the drift "
        "just before each synchronisation, over all epochs and ranks."))


def _divergence_row(layout: _Layout, record: dict) -> list | None:
    """The replicas' divergence of an inconsistent scheme, or of any scheme whose
    replicas drifted (None otherwise)."""
    consistent = distributed(record).get("consistent")
    drift = replica_divergence(global_epochs(record))
    if consistent is not False and not any(drift):
        return None
    known = [v for v in drift if v is not None]
    return [*layout.head(record), "yes" if consistent else "no",
            fmt_number(drift[-1] if drift else None),
            fmt_number(max(known) if known else None), _drift_before_sync(record)]


def _failed_table(layout: _Layout, failed: list[dict]) -> Table:
    settings = layout.settings
    return Table("Level 3 — configurations that failed",
                 ["Scheme", *(["Settings"] if settings else []), "Seed", "Rank", "Error"],
                 [[layout.labels[id(r)], *([settings.text(r)] if settings else []),
                   r["configuration"].get("seed"), r.get("rank", 0), r["error"]]
                  for r in failed])
