"""Level-1 section of a report: networks × executors, time with CIs, throughput,
accuracy against the reference executor, framework overhead, and where the time goes
(per operator type)."""
from __future__ import annotations

import os
from collections import OrderedDict

from deep500.report import sample_plots
from deep500.report.energy import energy_note, energy_text, has_energy
from deep500.report.microbatch_choice import microbatch_tables
from deep500.report.plots import cap_note, stacked_bars
from deep500.report.records import ReportContext, Settings, acceptance_failures, \
    by_outcome, distinct_labels, flags, measurement_warnings, metric, summary, \
    timing_text, verdict
from deep500.report.tables import Table, fmt_number, fmt_time
from deep500.report.time_bars import RecordGrid, median_time_bars, series_settings
from deep500.utils.byte_sizes import format_bytes

# Columns of their own: the network label carries the batch size, micro-batch and mode.
SHOWN = ("network", "batch_size", "microbatch", "memory_budget", "memory_policy", "mode",
         "executor")


def _label(record: dict) -> str:
    c = record["configuration"]
    micro = f" micro-batch {c['microbatch']}" if c.get("microbatch") else ""
    if c.get("microbatch") == "auto":
        micro += f" ≤ {format_bytes(c['memory_budget'])} ({c['memory_policy']})"
    return f"{c['network']['label']} b={c['batch_size']}{micro} {c['mode']}"


def build(records: list[dict], output_dir: str, context: ReportContext | None = None) -> dict:
    context = context or ReportContext({})
    measured, failed, skipped = by_outcome(records, 1)
    every = measured + failed + skipped
    settings = Settings(every, SHOWN, context.manifest)
    labels = distinct_labels(every, _label, lambda r: (
        f"{_label(r)}|{r['configuration']['executor']}|{settings.text(r)}"))
    extra = ["Settings"] if settings else []

    def label_and_settings(record):
        return [labels[id(record)], record["configuration"]["executor"],
                *([settings.text(record)] if settings else [])]
    multi_rank = any(r.get("size", 1) > 1 for r in records)
    with_energy = has_energy(measured)
    columns = ["Network", "Executor", *extra] + (["Rank"] if multi_rank else []) + [
        "Median time", "95% CI", "Reruns", "Samples/s", "L2 rel. error", "Max rel. error",
        "Framework overhead", "Peak memory"] + (["Energy per call"] if with_energy else []) \
        + ["Flags", "Acceptance"]
    table = Table("Level 1 — networks", columns, note=(
        "Each executor runs the same ONNX model with the same weights and inputs. Errors "
        "compare outputs (inference) or parameter gradients (backprop) with the reference "
        "executor's. Framework overhead is the share of a run spent outside operators. "
        "Reruns: the measured runs (+ warm-up runs, not counted). Flags: a 95% CI wider "
        f"than {context.ci_threshold:.0%} of the median, other processes using the CPU "
        "during the measurement (interference), re-measurements."))
    breakdown = Table("Level 1 — where the time goes (forward operators by type)",
                      ["Network", "Executor", *extra,
                       "Operator types (share of operator time)"])
    for record in measured:
        c = record["configuration"]
        median = summary(record, "WallclockTime", "median")
        low, high = summary(record, "WallclockTime", "ci_low"), summary(record,
                                                                         "WallclockTime",
                                                                         "ci_high")
        overhead = summary(record, "FrameworkOverhead", "overhead")
        row = label_and_settings(record) + ([record["rank"]] if multi_rank else [])
        row += [fmt_time(median),
                f"[{fmt_time(low)}, {fmt_time(high)}]" if low is not None else "n/a",
                timing_text(record),
                fmt_number(c["batch_size"] / median) if median else "n/a",
                fmt_number(summary(record, "L2Error", "relative")),
                fmt_number(summary(record, "MaxError", "relative")),
                f"{overhead:.1%}" if overhead is not None else "n/a",
                format_bytes(summary(record, "PeakMemory", "peak_bytes"))
                if metric(record, "PeakMemory") else "n/a"]
        row += [energy_text(record)] if with_energy else []
        row += [flags(record, context.ci_threshold), verdict(record)]
        table.rows.append(row)
        by_type = summary(record, "OperatorTimes", "by_op_type")
        if by_type:
            total = sum(by_type.values()) or 1.0
            shares = ", ".join(f"{k} {v / total:.0%}" for k, v in list(by_type.items())[:6])
            breakdown.rows.append(label_and_settings(record) + [shares])
    if with_energy:
        table.note += energy_note(measured)
    methods = sorted({summary(r, "PeakMemory", "measured_by") for r in measured} - {None})
    if methods:
        table.note += (" Peak memory: the most bytes held at once during a run (what "
                       "each method counts: docs/measurement.md), measured by " +
                       "; ".join(methods) + ".")
    tables = [t for t in (table, breakdown) if t.rows] + microbatch_tables(measured)
    if skipped:
        tables.append(Table("Level 1 — configurations not applicable",
                            ["Network", "Executor", *extra, "Why"],
                            [label_and_settings(r) + [r["reason"]]
                             for r in skipped if r.get("rank", 0) == 0]))
    if failed:
        tables.append(Table("Level 1 — configurations that failed",
                            ["Network", "Executor", *extra, "Rank", "Error"],
                            [label_and_settings(r) + [r["rank"], r["error"]]
                             for r in failed]))
    plots = _plots(measured, output_dir, settings, labels, context) if measured else []
    return {"tables": tables, "plots": plots, "measured": len(measured),
            "failed": len(failed),
            "warnings": measurement_warnings(
                measured, lambda r: f"{labels[id(r)]} on "
                                    f"{settings.label(r['configuration']['executor'], r)}"),
            "acceptance_failures": acceptance_failures(measured)}


def _plots(measured: list[dict], output_dir: str, settings: Settings, labels: dict,
           context: ReportContext) -> list[tuple[str, str]]:
    """Groups: networks (with batch size and mode); series: the executor and every other
    varied setting."""
    def series_of(record):
        return settings.label(record["configuration"]["executor"], record)
    named = series_settings(measured, SHOWN, context.manifest, context.per_seed, settings)
    grid = RecordGrid(measured, lambda r: labels[id(r)], lambda r: named.label(
        r["configuration"]["executor"], r))
    plots = []
    path = median_time_bars(os.path.join(output_dir, "plots", "level1_time.png"),
                            "Time per run", grid, context.figure_format)
    if path is not None:
        left_out = cap_note(len(grid.groups), len(grid.series))
        plots.append(("Time per network and executor" +
                      (f" ({left_out})" if left_out else ""), path))
    rank0 = [r for r in measured if r.get("rank", 0) == 0]
    with_breakdown = [r for r in rank0 if summary(r, "OperatorTimes", "by_op_type")]
    if with_breakdown:
        bars = [f"{labels[id(r)]} · {series_of(r)}" for r in with_breakdown]
        types = list(OrderedDict.fromkeys(
            t for r in with_breakdown for t in summary(r, "OperatorTimes", "by_op_type")))
        segments = {t: [summary(r, "OperatorTimes", "by_op_type").get(t, 0.0)
                        for r in with_breakdown] for t in types}
        path = os.path.join(output_dir, "plots", "level1_operators.png")
        stacked_bars(path, "Forward time by operator type", bars, segments,
                     xlabel="seconds (median run)", also=context.figure_format)
        left_out = cap_note(len(bars))
        plots.append(("Where the time goes, per operator type" +
                      (f" ({left_out})" if left_out else ""), path))
    if context.samples:
        plots += sample_plots.samples_plot(
            measured, lambda r: f"{labels[id(r)]} | {series_of(r)}",
            os.path.join(output_dir, "plots", "level1_samples.png"), context.samples,
            context.figure_format)
    return plots
