"""The rank × thread grid of a distributed recipe (``ranks`` and ``threads``; see
:mod:`deep500.recipe.rank_grid`): speedup and parallel efficiency of every grid point
against the 1 rank × 1 thread run of the same configuration, laid out as PyDTNN's
Table 1 (Barrachina et al., "PyDTNN: a user-friendly and extensible framework for
distributed deep learning", J. Supercomputing 2021: rows MPI processes, columns
threads per process, each cell the time to the target accuracy), plus the speedup
against ranks × threads with the ideal line.

Per grid point (rank 0's record; several seeds: their median):

- *time to target*: the slowest rank's epoch times (validation passes included)
  summed until rank 0's test accuracy first reaches ``TimeToAccuracy``'s target, as
  the Level-3 section counts it; without per-rank figures, the metric's own seconds;
- *time per epoch*: the median over epochs of the slowest rank's epoch time without
  its validation pass;
- *speedup* S = T(1 × 1) / T(ranks × threads), *efficiency* E = S / (ranks × threads)
  (the parallel efficiency of a fixed workload; here the number of epochs is fixed and
  the global batch grows with the ranks, as in PyDTNN's data parallelism).

A point whose ranks × threads exceed the CPUs the ranks could use is marked
oversubscribed (``⚠``): its times measure time sharing, not parallelism.
"""
from __future__ import annotations

import os
import statistics as stats

from deep500.report.plots import _pyplot, legend_name, save
from deep500.report.records import ReportContext, configuration_key, summary, value_text
from deep500.report.tables import Table, fmt_time

# What varies across a grid, or is expected to differ between its points.
GRID_KEYS = ("ranks", "threads", "seed")


def _grid_records(records: list[dict]) -> list[dict]:
    """Rank 0's measurements of a distributed recipe that names its ranks."""
    return [r for r in records if r.get("experiment") == "distributed"
            and r.get("kind") == "measurement" and r.get("rank", 0) == 0
            and r["configuration"].get("ranks") is not None]


def _point(record: dict) -> tuple[int, int]:
    configuration = record["configuration"]
    return configuration["ranks"], configuration.get("threads") or 1


def _rank_epochs(record: dict) -> list[list[dict]]:
    distributed = record.get("result", {}).get("details", {}).get("distributed") or {}
    return [[e for e in ranked.get("epochs", []) if e.get("completed", True)]
            for ranked in distributed.get("ranks", [])]


def epoch_seconds(record: dict) -> float | None:
    """Median over epochs of the slowest rank's epoch time, validation excluded."""
    per_rank = _rank_epochs(record)
    epochs = min((len(r) for r in per_rank), default=0)
    times = [max(r[i]["wall_time"] - (r[i].get("validation_time") or 0.0)
                 for r in per_rank) for i in range(epochs)]
    return stats.median(times) if times else None


def seconds_to_target(record: dict) -> float | None:
    """Seconds until rank 0's test accuracy first reached the TimeToAccuracy target,
    the slowest rank's epochs summed (validation included); None if not reached."""
    target = summary(record, "TimeToAccuracy", "target")
    if target is None:
        return None
    distributed = record.get("result", {}).get("details", {}).get("distributed") or {}
    epochs = distributed.get("epochs")
    if not epochs:
        return summary(record, "TimeToAccuracy", "seconds")
    elapsed = 0.0
    for epoch in epochs:
        elapsed += epoch["wall_time"]
        if epoch.get("test_accuracy") is not None and epoch["test_accuracy"] >= target:
            return elapsed
    return None


def _median(values):
    values = [v for v in values if v is not None]
    return stats.median(values) if values else None


def _groups(records: list[dict]) -> dict[str, dict[tuple, list[dict]]]:
    """Configurations apart from the grid's keys -> grid point -> its records."""
    groups: dict[str, dict[tuple, list[dict]]] = {}
    for record in records:
        key = configuration_key(record["configuration"], without=GRID_KEYS)
        groups.setdefault(key, {}).setdefault(_point(record), []).append(record)
    return groups


def _oversubscribed(records: list[dict]) -> dict | None:
    return next((r["oversubscribed"] for r in records if r.get("oversubscribed")), None)


def _cell(value, baseline, point, oversubscribed, missing: str) -> str:
    if value is None:
        return missing
    text = fmt_time(value)
    if baseline:
        speedup = baseline / value
        text += f" · {speedup:.2f}× · {speedup / (point[0] * point[1]):.0%}"
    if oversubscribed:
        text += (f" ⚠ oversubscribed ({oversubscribed['ranks']}×"
                 f"{oversubscribed['threads_per_rank']} > {oversubscribed['usable_cpus']} "
                 f"CPUs)")
    return text


def _varied_text(records: list[dict], key: str, group: dict) -> str:
    """The settings that tell this group from the others (for titles)."""
    others = [configuration_key(r["configuration"], without=GRID_KEYS) for r in records]
    if len(set(others)) == 1:
        return ""
    configuration = next(iter(group.values()))[0]["configuration"]
    varied = sorted({k for r in records for k, v in r["configuration"].items()
                     if k not in GRID_KEYS and v != configuration.get(k)})
    return " — " + ", ".join(f"{k} {value_text(configuration.get(k))}" for k in varied)


def build(records: list[dict], output_dir: str,
          context: ReportContext | None = None) -> dict:
    context = context or ReportContext({})
    grid = _grid_records(records)
    section = {"tables": [], "plots": [], "warnings": []}
    if not grid:
        return section
    usable = {r["oversubscribed"]["usable_cpus"] for r in grid if r.get("oversubscribed")}
    hardware = context.manifest.get("hardware", {})
    cpus = hardware.get("usable_cpus") or (min(usable) if usable else None)
    for key, group in _groups(grid).items():
        title = _varied_text(grid, key, group)
        ranks = sorted({p[0] for p in group})
        threads = sorted({p[1] for p in group})
        points = {p: {"epoch": _median([epoch_seconds(r) for r in rs]),
                      "target": _median([seconds_to_target(r) for r in rs]),
                      "over": _oversubscribed(rs), "records": rs}
                  for p, rs in group.items()}
        base = points.get((1, 1))
        target = summary(next(iter(group.values()))[0], "TimeToAccuracy", "target")
        note = ("Rows: MPI ranks; columns: threads per rank (PyDTNN's Table 1 layout). "
                "Each cell: time · speedup S against 1 rank × 1 thread · parallel "
                "efficiency S / (ranks × threads). Global batch = ranks × the batch per "
                "rank; the number of epochs is fixed.")
        if base is None:
            note += " No 1 rank × 1 thread run in this grid: times only."
        if cpus:
            note += (f" Measured on {cpus} usable CPU(s): points with ranks × threads > "
                     f"{cpus} are oversubscribed (⚠) and share the CPUs.")
        if any(len(rs) > 1 for rs in group.values()):
            note += " Several seeds per point: their median."
        scaling = {r["result"]["details"]["lr_scaling"]["rule"] for rs in group.values()
                   for r in rs if r.get("result", {}).get("details", {}).get("lr_scaling")}
        if scaling:
            note += (" Learning rate scaled with the ranks (" + ", ".join(sorted(scaling))
                     + " rule, Goyal et al. 2017), relative to the 1-rank rate.")
        for what, field, missing in (
                (f"time to {target:.0%} test accuracy" if target is not None else
                 "time to target accuracy (no TimeToAccuracy metric)", "target",
                 "not reached" if target is not None else "n/a"),
                ("time per epoch (slowest rank, median)", "epoch", "n/a")):
            baseline = base[field] if base else None
            rows = []
            for r in ranks:
                row = [f"{r} rank{'s' if r > 1 else ''}"]
                for t in threads:
                    p = points.get((r, t))
                    row.append("—" if p is None else
                               _cell(p[field], baseline, (r, t), p["over"], missing))
                rows.append(row)
            section["tables"].append(Table(
                f"Rank × thread grid — {what}{title}",
                ["Ranks \\ threads per rank", *(f"{t} thread{'s' if t > 1 else ''}"
                                                for t in threads)], rows, note=note))
        if base is not None and len(points) > 1:
            index = len(section["plots"])
            section["plots"].append(_speedup_plot(
                os.path.join(output_dir, "plots",
                             f"grid_speedup{'' if index == 0 else f'_{index}'}.png"),
                points, base, title, context.figure_format))
        over = [p for p, v in points.items() if v["over"]]
        if over:
            section["warnings"].append(
                "rank grid" + title + ": oversubscribed point(s) " +
                ", ".join(f"{r} ranks × {t} threads" for r, t in sorted(over)) +
                f" (more threads than the {cpus or '?'} usable CPUs): their speedups "
                f"measure time sharing")
    return section


def _speedup_plot(path: str, points: dict, base: dict, title: str,
                  also: str | None) -> tuple[str, str]:
    """Speedup against ranks × threads, per measure, with the ideal line S = p."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 5))
    workers = sorted({r * t for r, t in points})
    axes.plot(workers, workers, "k--", linewidth=1, label="ideal (S = ranks × threads)")
    # labels right of the epoch-time points, left of the time-to-target ones
    for field, name, marker, offset, align in (
            ("epoch", "time per epoch", "o", (6, 2), "left"),
            ("target", "time to target accuracy", "s", (-6, 2), "right")):
        if not base[field]:
            continue
        xs, ys, labels = [], [], []
        for (r, t), value in sorted(points.items(), key=lambda i: (i[0][0] * i[0][1], i[0])):
            if value[field]:
                xs.append(r * t)
                ys.append(base[field] / value[field])
                labels.append(f"{r}×{t}" + (" ⚠" if value["over"] else ""))
        if not xs:
            continue
        axes.plot(xs, ys, marker=marker, linestyle="none", label=legend_name(name))
        for x, y, label in zip(xs, ys, labels):
            axes.annotate(label, (x, y), textcoords="offset points", xytext=offset,
                          ha=align, fontsize=8)
    axes.set_xlabel("ranks × threads per rank")
    axes.set_ylabel("speedup against 1 rank × 1 thread")
    axes.set_xticks(workers)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    axes.set_title("Rank × thread grid: speedup" + title, fontsize=10)
    figure.tight_layout()
    return ("Speedup against ranks × threads per rank (labels: ranks×threads; ⚠ "
            "oversubscribed), with the ideal line", save(figure, path, also))
