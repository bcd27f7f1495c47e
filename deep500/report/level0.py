"""Level-0 section of a report: operators × frameworks, times with CIs, GFLOP/s and
errors against the float64 NumPy reference."""
from __future__ import annotations

import os
from collections import OrderedDict

from deep500.report.plots import grouped_bars
from deep500.report.records import of_level, summary as _summary, verdict
from deep500.report.tables import Table, fmt_number, fmt_time


def build(records: list[dict], output_dir: str) -> dict:
    """Tables, plot paths and notes for the level-0 measurements in ``records``."""
    measured = of_level(records, 0, "measurement")
    failed = of_level(records, 0, "error")
    multi_rank = any(r.get("size", 1) > 1 for r in records)
    columns = ["Operator", "Framework"] + (["Rank"] if multi_rank else []) + [
        "Median time", "95% CI of median", "GFLOP/s", "L2 rel. error", "Max rel. error",
        "Acceptance"]
    table = Table("Level 0 — operators", columns, note=(
        "Times are medians of the reruns with nonparametric 95% confidence intervals "
        "(Hoefler & Belli, SC'15). Errors are relative to the NumPy reference computed in "
        "float64 on the same inputs."))
    for record in measured:
        configuration = record["configuration"]
        low, high = (_summary(record, "WallclockTime", "ci_low"),
                     _summary(record, "WallclockTime", "ci_high"))
        row = [configuration["operator"]["label"], configuration["framework"]]
        row += [record["rank"]] if multi_rank else []
        row += [fmt_time(_summary(record, "WallclockTime", "median")),
                f"[{fmt_time(low)}, {fmt_time(high)}]" if low is not None else "n/a",
                fmt_number(_summary(record, "FLOPs", "gflops_per_s")),
                fmt_number(_summary(record, "L2Error", "relative")),
                fmt_number(_summary(record, "MaxError", "relative")), verdict(record)]
        table.rows.append(row)
    kernels = {r["configuration"]["framework"]: r["configuration"]["cpp_kernel"]
               for r in measured if "cpp_kernel" in r["configuration"]}
    if kernels:
        table.note += (" C++ kernels (" + ", ".join(
            f"{name}: {os.path.basename(k['cpp'])} for {k['op']}"
            for name, k in kernels.items()) + ") run on as many threads as they start "
            "themselves; they measure only on the operator they implement.")
    tables = [table] if measured else []
    if failed:
        tables.append(Table("Level 0 — configurations that failed",
                            ["Operator", "Framework", "Rank", "Error"],
                            [[r["configuration"]["operator"]["label"],
                              r["configuration"]["framework"], r["rank"], r["error"]]
                             for r in failed]))
    plots = _plots(measured, output_dir) if measured else []
    warnings = [f"{r['configuration']['operator']['label']} on "
                f"{r['configuration']['framework']}: {w}"
                for r in measured for m in r["result"]["metrics"] for w in m["warnings"]]
    return {"tables": tables, "plots": plots, "warnings": warnings,
            "measured": len(measured), "failed": len(failed),
            "acceptance_failures": sum(1 for r in measured if not r.get("passed", True))}


def _plots(measured: list[dict], output_dir: str) -> list[tuple[str, str]]:
    rank0 = [r for r in measured if r.get("rank", 0) == 0]
    operators = list(OrderedDict.fromkeys(r["configuration"]["operator"]["label"]
                                          for r in rank0))
    frameworks = list(OrderedDict.fromkeys(r["configuration"]["framework"] for r in rank0))
    lookup = {(r["configuration"]["operator"]["label"], r["configuration"]["framework"]): r
              for r in rank0}
    plots = []
    times = {f: [_summary(lookup.get((o, f), {}), "WallclockTime", "median")
                 for o in operators] for f in frameworks}
    if any(v is not None for values in times.values() for v in values):
        cis = {f: [(_summary(lookup.get((o, f), {}), "WallclockTime", "ci_low"),
                    _summary(lookup.get((o, f), {}), "WallclockTime", "ci_high"))
                   for o in operators] for f in frameworks}
        path = os.path.join(output_dir, "plots", "level0_time.png")
        grouped_bars(path, "Time per call (median, 95% CI)", operators, times, cis,
                     xlabel="seconds (log scale)", log_scale=True)
        plots.append(("Time per operator and framework", path))
    with_flops = [o for o in operators
                  if any(_summary(lookup.get((o, f), {}), "FLOPs", "gflops_per_s")
                         for f in frameworks)]
    if with_flops:
        rates = {f: [_summary(lookup.get((o, f), {}), "FLOPs", "gflops_per_s")
                     for o in with_flops] for f in frameworks}
        path = os.path.join(output_dir, "plots", "level0_gflops.png")
        grouped_bars(path, "Achieved GFLOP/s (analytic FLOPs / median time)", with_flops,
                     rates, xlabel="GFLOP/s")
        plots.append(("Achieved GFLOP/s", path))
    return plots
