"""Level-1 section of a report: networks × executors, time with CIs, throughput,
accuracy against the reference executor, framework overhead, and where the time goes
(per operator type)."""
from __future__ import annotations

import os
from collections import OrderedDict

from deep500.report.plots import grouped_bars, stacked_bars
from deep500.report.records import measurement_warnings, metric, of_level, summary, verdict
from deep500.report.tables import Table, fmt_number, fmt_time


def _label(record: dict) -> str:
    c = record["configuration"]
    micro = f" micro-batch {c['microbatch']}" if c.get("microbatch") else ""
    return f"{c['network']['label']} b={c['batch_size']}{micro} {c['mode']}"


def _bytes(value) -> str:
    if value is None:
        return "not reported"
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value} B"


def build(records: list[dict], output_dir: str) -> dict:
    measured = of_level(records, 1, "measurement")
    failed = of_level(records, 1, "error")
    skipped = of_level(records, 1, "skipped")
    multi_rank = any(r.get("size", 1) > 1 for r in records)
    columns = ["Network", "Executor"] + (["Rank"] if multi_rank else []) + [
        "Median time", "95% CI", "Samples/s", "L2 rel. error", "Max rel. error",
        "Framework overhead", "Peak memory", "Acceptance"]
    table = Table("Level 1 — networks", columns, note=(
        "Each executor runs the same ONNX model with the same weights and inputs. Errors "
        "compare outputs (inference) or parameter gradients (backprop) with the reference "
        "executor's. Framework overhead is the share of a run spent outside operators."))
    breakdown = Table("Level 1 — where the time goes (forward operators by type)",
                      ["Network", "Executor", "Operator types (share of operator time)"])
    for record in measured:
        c = record["configuration"]
        median = summary(record, "WallclockTime", "median")
        low, high = summary(record, "WallclockTime", "ci_low"), summary(record,
                                                                         "WallclockTime",
                                                                         "ci_high")
        overhead = summary(record, "FrameworkOverhead", "overhead")
        row = [_label(record), c["executor"]] + ([record["rank"]] if multi_rank else [])
        row += [fmt_time(median),
                f"[{fmt_time(low)}, {fmt_time(high)}]" if low is not None else "n/a",
                fmt_number(c["batch_size"] / median) if median else "n/a",
                fmt_number(summary(record, "L2Error", "relative")),
                fmt_number(summary(record, "MaxError", "relative")),
                f"{overhead:.1%}" if overhead is not None else "n/a",
                _bytes(summary(record, "PeakMemory", "peak_bytes"))
                if metric(record, "PeakMemory") else "n/a", verdict(record)]
        table.rows.append(row)
        by_type = summary(record, "OperatorTimes", "by_op_type")
        if by_type:
            total = sum(by_type.values()) or 1.0
            shares = ", ".join(f"{k} {v / total:.0%}" for k, v in list(by_type.items())[:6])
            breakdown.rows.append([_label(record), c["executor"], shares])
    tables = [t for t in (table, breakdown) if t.rows]
    if skipped:
        tables.append(Table("Level 1 — configurations not applicable",
                            ["Network", "Executor", "Why"],
                            [[_label(r), r["configuration"]["executor"], r["reason"]]
                             for r in skipped]))
    if failed:
        tables.append(Table("Level 1 — configurations that failed",
                            ["Network", "Executor", "Rank", "Error"],
                            [[_label(r), r["configuration"]["executor"], r["rank"],
                              r["error"]] for r in failed]))
    plots = _plots(measured, output_dir) if measured else []
    return {"tables": tables, "plots": plots, "measured": len(measured),
            "failed": len(failed),
            "warnings": measurement_warnings(
                measured, lambda r: f"{_label(r)} on {r['configuration']['executor']}"),
            "acceptance_failures": sum(1 for r in measured if not r.get("passed", True))}


def _plots(measured: list[dict], output_dir: str) -> list[tuple[str, str]]:
    rank0 = [r for r in measured if r.get("rank", 0) == 0]
    groups = list(OrderedDict.fromkeys(_label(r) for r in rank0))
    executors = list(OrderedDict.fromkeys(r["configuration"]["executor"] for r in rank0))
    lookup = {(_label(r), r["configuration"]["executor"]): r for r in rank0}
    plots = []
    times = {e: [summary(lookup.get((g, e), {}), "WallclockTime", "median") for g in groups]
             for e in executors}
    if any(v is not None for values in times.values() for v in values):
        cis = {e: [(summary(lookup.get((g, e), {}), "WallclockTime", "ci_low"),
                    summary(lookup.get((g, e), {}), "WallclockTime", "ci_high"))
                   for g in groups] for e in executors}
        path = os.path.join(output_dir, "plots", "level1_time.png")
        grouped_bars(path, "Time per run (median, 95% CI)", groups, times, cis,
                     xlabel="seconds (log scale)", log_scale=True)
        plots.append(("Time per network and executor", path))
    with_breakdown = [r for r in rank0 if summary(r, "OperatorTimes", "by_op_type")]
    if with_breakdown:
        bars = [f"{_label(r)} · {r['configuration']['executor']}" for r in with_breakdown]
        types = list(OrderedDict.fromkeys(
            t for r in with_breakdown for t in summary(r, "OperatorTimes", "by_op_type")))
        segments = {t: [summary(r, "OperatorTimes", "by_op_type").get(t, 0.0)
                        for r in with_breakdown] for t in types}
        path = os.path.join(output_dir, "plots", "level1_operators.png")
        stacked_bars(path, "Forward time by operator type", bars, segments,
                     xlabel="seconds (median run)")
        plots.append(("Where the time goes, per operator type", path))
    return plots
