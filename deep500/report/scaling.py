"""The report's section "Scaling: measured and predicted", for distributed rank grids
that vary the number of ranks and either say how they scale (``scaling: weak`` /
``strong``) or were predicted (a machine file; :mod:`deep500.recipe.grid_predictions`,
``rank_grid.predicted`` in the manifest): ``recipes/scaling.yaml``. The Deep500
paper's Fig. 12 (Ben-Nun et al., IPDPS 2019) and PyDTNN's Fig. 3 (Barrachina et al.,
J. Supercomputing 2021) draw the same curves.

Per scheme and scaling (every configuration apart from ``ranks`` and ``seed``), per
rank count p, from rank 0's record:

* *time per epoch* T(p): the median over epochs of the slowest rank's epoch time
  without its validation pass (as the rank × thread grid counts it);
* *speedup* S(p) = T(1) / T(p), *efficiency* E(p) = S(p) / p. An epoch is one pass
  over the same training set, so in strong scaling (global batch fixed, each rank
  global / p samples) S is the step's speedup, and in weak scaling (batch per rank
  fixed, p times fewer steps per epoch) E is the weak-scaling efficiency
  T_step(1) / T_step(p);
* *predicted*: the step ``d5.simulate_training`` predicts on the machine file, times
  the steps per epoch the run took; S and E the same way. Its ratio to the measured
  step (the median over steps of the slowest rank's ``optimizer.step``) is shown,
  so "measured vs modelled" is always visible (DESIGN.md);
* *time to target*: the slowest rank's epochs (validation included) until rank 0's
  test accuracy first reached ``TimeToAccuracy``'s target (measured only: the model
  predicts time, not convergence).

A point whose ranks × threads exceed the usable CPUs is marked oversubscribed (⚠), as
the rank × thread grid marks it: its ranks share cores, so its time measures time
sharing as well as scaling, and the prediction (one core per rank) is a bound on it.
"""
from __future__ import annotations

import statistics as stats

from deep500.lv3_distributed.distributed_training import synchronous_step_times
from deep500.report import scaling_plots
from deep500.report.distributed_records import distributed
from deep500.report.grid import epoch_seconds, seconds_to_target
from deep500.report.records import ReportContext, configuration_key, summary, value_text
from deep500.report.tables import Table, fmt_time

GROUP_KEYS = ("ranks", "seed")


def _records(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("experiment") == "distributed"
            and r.get("kind") == "measurement" and r.get("rank", 0) == 0
            and r["configuration"].get("ranks") is not None]


def _predicted(manifest: dict) -> dict:
    """Configuration index -> its prediction entry (``rank_grid.predicted``)."""
    grid = (manifest.get("rank_grid") or {}).get("predicted") or {}
    return {entry["index"]: entry for entry in grid.get("configurations", [])}


def _steps_per_epoch(record: dict) -> int | None:
    ranks = distributed(record).get("ranks") or []
    epochs = [e for e in (ranks[0].get("epochs", []) if ranks else [])
              if e.get("completed", True)]
    return epochs[0].get("steps") if epochs else None


def measured_step(record: dict) -> float | None:
    steps = synchronous_step_times(distributed(record).get("ranks") or [])
    return stats.median(steps) if steps else None


class Point:
    """One rank count of one curve: measured (and predicted) seconds."""

    def __init__(self, record: dict, predicted: dict | None):
        self.record = record
        self.ranks = record["configuration"]["ranks"]
        batch = (record.get("result") or {}).get("details", {}).get("batch") or {}
        self.batch, self.global_batch = batch.get("per_rank"), batch.get("global")
        self.epoch = epoch_seconds(record)
        self.target = seconds_to_target(record)
        self.step = measured_step(record)
        self.over = record.get("oversubscribed")
        self.modelled_as = (predicted or {}).get("modelled_as")
        step = ((predicted or {}).get("predicted") or {}).get("step_s")
        steps = _steps_per_epoch(record)
        self.predicted_step = step
        self.predicted_epoch = step * steps if step and steps else None


class Curve:
    """The points of one scheme and scaling, by rank count, and their speedups."""

    def __init__(self, name: str, points: list[Point]):
        self.name = name
        self.points = sorted(points, key=lambda p: p.ranks)
        self.base = next((p for p in self.points if p.ranks == 1), None)
        self.scaling = (self.points[0].record["configuration"].get("scaling") or "weak")

    def speedup(self, point: Point, predicted: bool = False) -> float | None:
        field = "predicted_epoch" if predicted else "epoch"
        base = getattr(self.base, field, None) if self.base else None
        value = getattr(point, field)
        return base / value if base and value else None

    def efficiency(self, point: Point, predicted: bool = False) -> float | None:
        speedup = self.speedup(point, predicted)
        return speedup / point.ranks if speedup is not None else None


def _curve_name(record: dict, varied: list[str]) -> str:
    configuration = record["configuration"]
    scheme = configuration["scheme"]["label"]
    rest = [f"{k} {value_text(configuration.get(k))}" for k in varied
            if k not in ("scheme", "scaling")]
    return " · ".join([scheme, f"{configuration.get('scaling') or 'weak'} scaling", *rest])


def curves(records: list[dict], manifest: dict) -> list[Curve]:
    """The section's curves (module docstring): rank 0's records grouped by everything
    but ``ranks`` and ``seed`` (the lowest seed's record of each point)."""
    predicted = _predicted(manifest)
    groups: dict[str, list[dict]] = {}
    for record in sorted(records, key=lambda r: r["configuration"].get("seed", 0)):
        key = configuration_key(record["configuration"], without=GROUP_KEYS)
        groups.setdefault(key, []).append(record)
    varied = sorted({k for r in records for k, v in r["configuration"].items()
                     if k not in GROUP_KEYS
                     and v != records[0]["configuration"].get(k)})
    result = []
    for group in groups.values():
        seen = {}
        for record in group:
            seen.setdefault(record["configuration"]["ranks"], record)
        if len(seen) < 2:
            continue
        result.append(Curve(_curve_name(group[0], varied),
                            [Point(r, predicted.get(r["index"])) for r in seen.values()]))
    return result


def _pair(measured, predicted, text) -> str:
    shown = text(measured)
    return shown + (f" ({text(predicted)})" if predicted is not None else "")


def _percent(value) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _times(value) -> str:
    return "n/a" if value is None else f"{value:.2f}×"


def _over_text(over: dict | None) -> str:
    if not over:
        return ""
    return (f"⚠ oversubscribed ({over['ranks']}×{over['threads_per_rank']} > "
            f"{over['usable_cpus']} CPUs)")


def _table(curve: Curve, target) -> Table:
    rows = []
    for point in curve.points:
        ratio = (f"{point.predicted_step / point.step:.2f}"
                 if point.predicted_step and point.step else "n/a")
        rows.append([
            point.ranks, f"{point.batch} ({point.global_batch})",
            _pair(point.epoch, point.predicted_epoch, fmt_time),
            _pair(curve.speedup(point), curve.speedup(point, True) if point.predicted_epoch
                  else None, _times),
            _pair(curve.efficiency(point), curve.efficiency(point, True)
                  if point.predicted_epoch else None, _percent),
            _pair(point.step, point.predicted_step, fmt_time), ratio,
            fmt_time(point.target) if point.target is not None else
            ("not reached" if target is not None else "n/a"), _over_text(point.over)])
    modelled = next((p.modelled_as for p in curve.points if p.modelled_as), None)
    note = (f"{curve.scaling.capitalize()} scaling: "
            + ("the global batch is fixed and split over the ranks. " if
               curve.scaling == "strong" else
               "each rank takes the same batch, the global batch grows with the ranks. ")
            + "Cells: measured (predicted). Speedup and efficiency against 1 rank, from "
              "the time per epoch." + (f" Predicted: {modelled}." if modelled else
                                       " Not predicted (no machine file, or a scheme "
                                       "the simulator does not model)."))
    return Table(f"Scaling: measured and predicted — {curve.name}",
                 ["Ranks", "Batch per rank (global)", "Time per epoch",
                  "Speedup", "Efficiency", "Training step", "Predicted / measured step",
                  "Time to " + (f"{target:.0%} test acc." if target is not None
                                else "target"), "Flags"], rows, note=note)


def build(records: list[dict], output_dir: str,
          context: ReportContext | None = None) -> dict:
    context = context or ReportContext({})
    chosen = _records(records)
    section = {"tables": [], "plots": [], "warnings": []}
    predictions = (context.manifest.get("rank_grid") or {}).get("predicted")
    if not chosen or not (predictions or any(r["configuration"].get("scaling")
                                             for r in chosen)):
        return section
    found = curves(chosen, context.manifest)
    if not found:
        return section
    target = summary(chosen[0], "TimeToAccuracy", "target")
    section["tables"] += [_table(curve, target) for curve in found]
    machine = (predictions or {}).get("machine") or {}
    section["plots"].append(scaling_plots.plot(found, output_dir, machine.get("name"),
                                               context.figure_format))
    over = sorted({p.ranks for c in found for p in c.points if p.over})
    if over:
        cpus = next(p.over["usable_cpus"] for c in found for p in c.points if p.over)
        section["warnings"].append(
            f"scaling: {', '.join(map(str, over))} ranks oversubscribe the {cpus} usable "
            f"CPU(s): their times measure time sharing, and the predictions (one core per "
            f"rank) bound them from below")
    return section
