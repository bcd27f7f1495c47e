"""Level-0 section of a report: operators × frameworks (× every other varied setting),
times with CIs, how many reruns and warm-up runs, GFLOP/s with the CI carried over from
the time, errors against the float64 NumPy reference, and flags for rows not to trust
blindly (wide CI, interference)."""
from __future__ import annotations

import os

from deep500.report import distribution_plots, sample_plots
from deep500.report.energy import energy_note, energy_text, has_energy
from deep500.report.plots import cap_note, grouped_bars
from deep500.report.records import ReportContext, Settings, acceptance_failures, \
    by_outcome, distinct_labels, flags, summary as _summary, timing_text, verdict
from deep500.report.tables import Table, fmt_number, fmt_time
from deep500.report.time_bars import RecordGrid, median_time_bars, series_settings

# Columns of their own: the operator, the framework (a C++ kernel is a framework).
SHOWN = ("operator", "framework", "cpp_kernel")


def _operator(record: dict) -> str:
    return record["configuration"]["operator"]["label"]


def gflops_ci(record: dict) -> tuple:
    """(low, high) GFLOP/s: the analytic FLOPs over the time CI's high and low ends."""
    flops = _summary(record, "FLOPs", "flops")
    low, high = (_summary(record, "WallclockTime", "ci_low"),
                 _summary(record, "WallclockTime", "ci_high"))
    if not flops or not low or not high or low != low or high != high:
        return None, None
    return flops / high / 1e9, flops / low / 1e9


def _gflops_text(record: dict) -> str:
    rate = _summary(record, "FLOPs", "gflops_per_s")
    if rate is None:
        return "n/a"
    low, high = gflops_ci(record)
    return fmt_number(rate) + (f" [{fmt_number(low)}, {fmt_number(high)}]"
                               if low is not None else "")


def build(records: list[dict], output_dir: str, context: ReportContext | None = None) -> dict:
    """Tables, plot paths and notes for the level-0 measurements in ``records``."""
    context = context or ReportContext({})
    measured, failed, skipped = by_outcome(records, 0)
    settings = Settings(measured + failed + skipped, SHOWN, context.manifest)
    multi_rank = any(r.get("size", 1) > 1 for r in records)
    with_energy = has_energy(measured)
    columns = (["Operator", "Framework"] + (["Settings"] if settings else []) +
               (["Rank"] if multi_rank else []) +
               ["Median time", "95% CI of median", "Reruns", "GFLOP/s [95% CI]",
                "L2 rel. error", "Max rel. error"] +
               (["Energy per call"] if with_energy else []) + ["Flags", "Acceptance"])
    table = Table("Level 0 — operators", columns, note=(
        "Times are medians of the reruns with nonparametric 95% confidence intervals "
        "(Hoefler & Belli, SC'15); Reruns: the measured calls (+ the warm-up calls "
        "before them, not counted). GFLOP/s: analytic FLOPs over the median time, its CI "
        "from the time's CI. Errors are relative to the NumPy reference computed in "
        f"float64 on the same inputs. Flags: a 95% CI wider than "
        f"{context.ci_threshold:.0%} of the median, other processes using the CPU "
        "during the measurement (interference), re-measurements."))
    labels = distinct_labels(measured + failed + skipped, _operator, lambda r: (
        f"{_operator(r)}|{r['configuration']['framework']}|{settings.text(r)}"))
    for record in measured:
        configuration = record["configuration"]
        low, high = (_summary(record, "WallclockTime", "ci_low"),
                     _summary(record, "WallclockTime", "ci_high"))
        row = [labels[id(record)], configuration["framework"]]
        row += [settings.text(record)] if settings else []
        row += [record["rank"]] if multi_rank else []
        row += [fmt_time(_summary(record, "WallclockTime", "median")),
                f"[{fmt_time(low)}, {fmt_time(high)}]" if low is not None else "n/a",
                timing_text(record), _gflops_text(record),
                fmt_number(_summary(record, "L2Error", "relative")),
                fmt_number(_summary(record, "MaxError", "relative"))]
        row += [energy_text(record)] if with_energy else []
        row += [flags(record, context.ci_threshold), verdict(record)]
        table.rows.append(row)
    if with_energy:
        table.note += energy_note(measured)
    kernels = {r["configuration"]["framework"]: r["configuration"]["cpp_kernel"]
               for r in measured if "cpp_kernel" in r["configuration"]}
    if kernels:
        table.note += (" C++ kernels (" + ", ".join(
            f"{name}: {os.path.basename(k['cpp'])} for {k['op']}"
            for name, k in kernels.items()) + ") run on as many threads as they start "
            "themselves; they measure only on the operator they implement.")
    tables = [table] if measured else []
    extra = ["Settings"] if settings else []
    if skipped:
        tables.append(Table("Level 0 — configurations not applicable",
                            ["Operator", "Framework", *extra, "Why"],
                            [[labels[id(r)], r["configuration"]["framework"],
                              *([settings.text(r)] if settings else []), r["reason"]]
                             for r in skipped if r.get("rank", 0) == 0]))
    if failed:
        tables.append(Table("Level 0 — configurations that failed",
                            ["Operator", "Framework", *extra, "Rank", "Error"],
                            [[labels[id(r)], r["configuration"]["framework"],
                              *([settings.text(r)] if settings else []), r["rank"],
                              r["error"]] for r in failed]))
    plots = _plots(measured, output_dir, settings, labels, context, tables) \
        if measured else []
    selections = context.manifest.get("row_selections") or []
    if selections and tables:
        tables[0].note += (" Operators chosen by rows (each row an operator; sampled "
                           "rows say so): " + "; ".join(map(str, selections)) + ".")
    warnings = [f"{labels[id(r)]} on {settings.label(r['configuration']['framework'], r)}: "
                f"{w}" for r in measured for m in r["result"]["metrics"] for w in m["warnings"]]
    return {"tables": tables, "plots": plots, "warnings": warnings,
            "measured": len(measured), "failed": len(failed),
            "acceptance_failures": acceptance_failures(measured)}


def _plots(measured: list[dict], output_dir: str, settings: Settings, labels: dict,
           context: ReportContext, tables: list) -> list[tuple[str, str]]:
    """Groups: operators; series: framework and every other varied setting, so a
    recipe varying threads shows each framework once per thread count (seeds folded
    where one series per seed would be too many: :mod:`deep500.report.time_bars`).
    Operator types measured at several sizes are also drawn as distributions over
    their sizes (:mod:`deep500.report.distribution_plots`, appending its tables to
    ``tables``), and, where the report asks for them, the raw samples of up to 12
    configurations (:mod:`deep500.report.sample_plots`)."""
    named = series_settings(measured, SHOWN, context.manifest, context.per_seed, settings)
    grid = RecordGrid(measured, lambda r: labels[id(r)], lambda r: named.label(
        r["configuration"]["framework"], r))
    left_out = cap_note(len(grid.groups), len(grid.series))
    suffix = f" ({left_out})" if left_out else ""
    plots = []
    path = median_time_bars(os.path.join(output_dir, "plots", "level0_time.png"),
                            "Time per call", grid, context.figure_format)
    if path is not None:
        plots.append((f"Time per operator and framework{suffix}", path))
    with_flops = [o for o in grid.groups
                  if any(_summary(grid.record(o, s), "FLOPs", "gflops_per_s")
                         for s in grid.series)]
    if with_flops:
        rates = grid.values("FLOPs", "gflops_per_s", with_flops)
        if grid.folded:
            cis = grid.seed_cis("FLOPs", "gflops_per_s", with_flops)
            title = "Achieved GFLOP/s (mean over seeds, 95% CI over seeds)"
        else:
            cis = {s: [gflops_ci(grid.record(o, s)) for o in with_flops]
                   for s in grid.series}
            title = "Achieved GFLOP/s (analytic FLOPs / median time, 95% CI)"
        path = os.path.join(output_dir, "plots", "level0_gflops.png")
        grouped_bars(path, title, with_flops, rates, cis, xlabel="GFLOP/s",
                     also=context.figure_format)
        left_out = cap_note(len(with_flops), len(grid.series))
        plots.append(("Achieved GFLOP/s" + (f" ({left_out})" if left_out else ""), path))
    op_types = {labels[id(r)]: r["configuration"]["operator"]["op_type"] for r in measured}
    more_tables, more_plots = distribution_plots.build(grid, op_types, output_dir,
                                                       context.figure_format)
    tables += more_tables
    plots += more_plots
    if context.samples:
        plots += sample_plots.samples_plot(
            measured, lambda r: f"{labels[id(r)]} | "
                                f"{named.label(r['configuration']['framework'], r)}",
            os.path.join(output_dir, "plots", "level0_samples.png"), context.samples,
            context.figure_format)
    return plots
