"""The report's section "Dataset latency", for runs of ``experiment: datasets``
(:mod:`deep500.recipe.experiments.datasets`; Deep500 paper, Fig. 8 and Table III):
per dataset × storage × JPEG decoder × order, the median time to draw one minibatch
with its nonparametric 95% CI (``DatasetLatency``), samples per second and the bytes
the storage holds; decoders that could not run here are listed as "not available:
<reason>". The plot draws the medians as grouped bars (one group per dataset,
storage and decoder, one bar per order) with the CIs as whiskers.
"""
from __future__ import annotations

import os

from deep500.report.plots import grouped_bars
from deep500.report.records import (ReportContext, flags, measurement_warnings, metric,
                                    verdict)
from deep500.report.tables import Table, fmt_time

#: The experiment whose records this section shows (and no other section does).
EXPERIMENTS = ("datasets",)
STORAGE_ORDER = ("memory", "idx", "jpeg-tar", "synthetic")
ORDERS = ("sequential", "shuffled")
LATENCY = "DatasetLatency"


def group_label(configuration: dict) -> str:
    """``dataset · storage`` (``· decoder`` for the tar of JPEGs)."""
    label = f"{configuration['dataset']} · {configuration['storage']}"
    return label + (f" · {configuration['decoder']}" if configuration.get("decoder") else "")


def _sort_key(record: dict):
    c = record["configuration"]
    storage = c["storage"]
    return (c["dataset"], STORAGE_ORDER.index(storage) if storage in STORAGE_ORDER else 99,
            str(c.get("decoder")), ORDERS.index(c["order"]) if c["order"] in ORDERS else 9,
            c.get("batch_size", 0), c.get("seed", 0))


def _unavailable(record: dict) -> bool:
    """A skipped configuration of the tar of JPEGs: its decoder cannot run here (the
    other skipped ones pair a decoder with a storage that has no JPEGs)."""
    return record["kind"] == "skipped" and record["configuration"]["storage"] == "jpeg-tar"


def _bytes(files: dict) -> str:
    total = sum(files.values())
    if not files:
        return "none (no file)"
    for unit, scale in (("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if total >= scale:
            return f"{total / scale:.3g} {unit}"
    return f"{total} B"


def _ci_flag(latency: dict, threshold: float) -> str:
    width = latency["summary"].get("ci_relative_width")
    if not isinstance(width, (int, float)) or width != width:
        return f"⚠ no CI: {latency['summary'].get('n')} draws are too few"
    return f"⚠ wide CI: {width:.0%} of the median" if width > threshold else ""


def _row(record: dict, threshold: float) -> list:
    c = record["configuration"]
    head = [c["dataset"], c["storage"], c.get("decoder") or "—", c["order"],
            c.get("batch_size")]
    if record["kind"] == "skipped":
        return head + [record.get("reason"), "", "", "", "", "—", "—"]
    if record["kind"] == "error":
        return head + [f"FAIL: {record.get('error')}", "", "", "", "", "—", "—"]
    latency = metric(record, LATENCY)
    if latency is None:
        return head + [f"not measured (no {LATENCY} metric)", "", "", "", "", "—", "—"]
    s = latency["summary"]
    storage = (record["result"].get("details") or {}).get("storage") or {}
    ci = (f"{fmt_time(s['ci_low'])} – {fmt_time(s['ci_high'])}"
          if s.get("ci_low") == s.get("ci_low") and s.get("ci_low") is not None else "n/a")
    shown_flags = "; ".join(f for f in (flags(record), _ci_flag(latency, threshold))
                            if f and f != "—") or "—"
    rate = s.get("samples_per_second")
    return head + [fmt_time(s["median"]), ci, f"{rate:,.0f}" if rate else "n/a",
                   f"{s['n']} (+{s.get('warmup', 0)} warm-up)",
                   _bytes(storage.get("files") or {}), shown_flags, verdict(record)]


def build(records: list[dict], output_dir: str, context: ReportContext | None = None) -> dict:
    context = context or ReportContext({})
    mine = [r for r in records if r.get("experiment") in EXPERIMENTS]
    measured = sorted((r for r in mine if r["kind"] == "measurement"), key=_sort_key)
    failed = [r for r in mine if r["kind"] == "error"]
    unavailable = [r for r in mine if _unavailable(r)]
    not_applicable = sum(1 for r in mine if r["kind"] == "skipped" and not _unavailable(r))
    shown = sorted(measured + failed + unavailable, key=_sort_key)
    tables, plots = [], []
    if shown:
        note = ("Median time to draw one minibatch (next(sampler): read, decode, scale to "
                "float32 N×C×H×W in [0, 1], stack), with its nonparametric 95% CI "
                "(Hoefler & Belli, SC'15), after the warm-up draws. Every storage serves "
                "the same 8-bit images: memory (uint8 arrays), idx (an IDX file read per "
                "minibatch, one read per run of consecutive samples), jpeg-tar (an "
                "uncompressed tar of JPEGs, one read and one decode per sample by the "
                "decoder named), synthetic (random samples generated per draw, no "
                "storage). Order: sequential (file order) or shuffled (a seeded "
                "permutation per epoch). The files were just written: reads come from "
                "the page cache. Bytes: what the storage's files hold on disk.")
        if not_applicable:
            note += (f" {not_applicable} configurations pairing a decoder with a storage "
                     f"without JPEGs were not measured (decoders apply to jpeg-tar "
                     f"alone).")
        table = Table("Dataset latency — time per minibatch", [
            "Dataset", "Storage", "Decoder", "Order", "Batch", "Median", "95% CI",
            "Samples/s", "Draws", "Bytes stored", "Flags", "Acceptance"], note=note)
        table.rows = [_row(r, context.ci_threshold) for r in shown]
        tables.append(table)
    if measured:
        plots.append(("Dataset latency: median time per minibatch, 95% CI whiskers",
                      _plot(measured, output_dir, context)))
    return {"tables": tables, "plots": plots, "measured": len(measured),
            "failed": len(failed),
            "warnings": measurement_warnings(measured, lambda r: group_label(
                r["configuration"]) + f" · {r['configuration']['order']}"),
            "acceptance_failures": sum(1 for r in measured if not r.get("passed", True))}


def _plot(measured: list[dict], output_dir: str, context: ReportContext) -> str:
    groups = list(dict.fromkeys(group_label(r["configuration"]) for r in measured))
    orders = list(dict.fromkeys(r["configuration"]["order"] for r in measured))
    series = {o: [None] * len(groups) for o in orders}
    errors = {o: [(None, None)] * len(groups) for o in orders}
    for record in measured:
        s = metric(record, LATENCY)["summary"] if metric(record, LATENCY) else None
        if not s:
            continue
        i, order = groups.index(group_label(record["configuration"])), \
            record["configuration"]["order"]
        series[order][i] = s["median"] * 1e3
        low, high = s.get("ci_low"), s.get("ci_high")
        if low == low and high == high and low is not None:
            errors[order][i] = (low * 1e3, high * 1e3)
    batches = sorted({r["configuration"].get("batch_size") for r in measured})
    title = (f"Time per minibatch of {', '.join(map(str, batches))} "
             f"(median, 95% CI; log scale)")
    return grouped_bars(os.path.join(output_dir, "plots", "dataset_latency.png"), title,
                        groups, series, errors, xlabel="milliseconds per minibatch",
                        log_scale=True, also=context.figure_format)
