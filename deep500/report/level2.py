"""Level-2 section of a report: training runs across executors and optimizers (and every
other varied setting) — accuracy, time per epoch with its spread, time-to-accuracy and
how it adds up (epochs × time per epoch, validation and first-epoch warm-up included),
time per phase, loss and accuracy curves, and the trajectory divergence of each
optimizer from the reference one (Fig. 11 of the Deep500 paper; the figures are
:mod:`deep500.report.level2_plots`).

Runs that differ only in their seed are one row: means with Student-t 95% CIs, and
time-to-accuracy as MLPerf scores it (:mod:`deep500.report.seeds`); ``per_seed`` shows
one row per run.
"""
from __future__ import annotations

import statistics as stats

from deep500.report import level2_plots
from deep500.report.records import ReportContext, Settings, acceptance_failures, \
    by_outcome, distinct_labels, flags, measurement_warnings, summary, verdict
from deep500.report.seeds import fmt_mean_ci, seed_groups, seeds_text, time_to_target_text
from deep500.report.tables import Table, fmt_number, fmt_time
from deep500.report.training_records import all_epochs, completed_epochs, epoch_times, \
    optimizer_text, training_label

SHOWN = ("executor", "optimizer")


def _spread(times: list[float]) -> str:
    """``min / median / max`` of epoch times."""
    if not times:
        return "n/a"
    return f"{fmt_time(min(times))} / {fmt_time(stats.median(times))} / {fmt_time(max(times))}"


def _percent(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def to_target_parts(record: dict) -> dict | None:
    """How the time to target of one run adds up, from its epoch statistics: the
    epochs up to the one whose validation first reached the target (as
    TimeToAccuracy counts them), their total wall time, the first epoch's, the later
    epochs' (sum and median), and the validation, data loading and optimizer-step time
    within the total. ``None`` if the target was not reached."""
    if not summary(record, "TimeToAccuracy", "reached"):
        return None
    count = summary(record, "TimeToAccuracy", "epochs")
    epochs = all_epochs(record)[:count]
    if not epochs:
        return None
    walls = [e.get("wall_time") or 0.0 for e in epochs]
    parts = {"epochs": len(epochs), "total": sum(walls), "first": walls[0],
             "later": sum(walls[1:]),
             "later_median": stats.median(walls[1:]) if len(walls) > 1 else None,
             "validation": sum(e.get("validation_time") or 0.0 for e in epochs),
             "data": sum(e.get("data_time") or 0.0 for e in epochs),
             "steps": sum(e.get("step_time") or 0.0 for e in epochs)}
    parts["other"] = parts["total"] - parts["validation"] - parts["data"] - parts["steps"]
    return parts


def _mean_parts(group: list[dict]) -> tuple[dict | None, int]:
    """The mean of :func:`to_target_parts` over the runs that reached the target."""
    reached = [p for p in (to_target_parts(r) for r in group) if p is not None]
    if not reached:
        return None, 0
    mean = {}
    for key in reached[0]:
        values = [p[key] for p in reached if p[key] is not None]
        mean[key] = sum(values) / len(values) if values else None
    return mean, len(reached)


def _cell(group: list[dict], values: list, fmt) -> str:
    """One run's value, or the mean ± 95% CI half-width over the seeds."""
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return fmt(values[0]) if len(group) == 1 else fmt_mean_ci(values, fmt)


def _group_verdict(group: list[dict]) -> str:
    if len(group) == 1:
        return verdict(group[0])
    if not any(r.get("acceptance") for r in group):
        return "—"
    failing = [r for r in group if r.get("acceptance") and not r.get("passed")]
    if not failing:
        return "pass"
    return "; ".join(f"seed {r['configuration'].get('seed')}: {verdict(r)}" for r in failing)


def _group_flags(group: list[dict], threshold: float) -> str:
    shown = []
    for record in group:
        text = flags(record, threshold)
        if text != "—":
            seed = record["configuration"].get("seed")
            shown.append(text if len(group) == 1 else f"seed {seed}: {text}")
    return "; ".join(shown) or "—"


def build(records: list[dict], output_dir: str, context: ReportContext | None = None) -> dict:
    context = context or ReportContext({})
    measured, failed, skipped = by_outcome(records, 2)
    layout = _Layout(records, measured, failed + skipped, context)
    tables = _group_tables(layout, context)
    if skipped:
        tables.append(_skipped_table(layout, skipped, context))
    if failed:
        tables.append(Table("Level 2 — configurations that failed",
                            ["Executor", "Optimizer", *layout.extra, "Seed", "Rank", "Error"],
                            [layout.head(r)[:2 + len(layout.extra)] + [
                                r["configuration"].get("seed"), r.get("rank", 0),
                                r["error"]] for r in failed]))
    plots = (level2_plots.plots(layout.groups, output_dir, layout.settings, layout.labels,
                                context) if measured else [])
    settings, with_seeds = layout.settings, layout.with_seeds
    return {"tables": tables, "plots": plots, "measured": len(measured),
            "failed": len(failed),
            "warnings": measurement_warnings(
                measured, lambda r: settings.label(training_label(r), r) + (
                    f" (seed {r['configuration'].get('seed')})" if with_seeds else "")),
            "acceptance_failures": acceptance_failures(measured)}


class _Layout:
    """How the section's rows are made: runs grouped per rank over their seeds
    (``groups``), the settings and optimizer names that tell rows apart, and the
    columns every table starts with (executor, optimizer, settings, rank, seeds)."""

    def __init__(self, records: list[dict], measured: list[dict], others: list[dict],
                 context: ReportContext):
        every = measured + others
        aggregated = () if context.per_seed else ("seed",)
        self.settings = Settings(every, SHOWN, context.manifest, aggregated=aggregated)
        self.multi_rank = any(r.get("size", 1) > 1 for r in records)
        self.labels = distinct_labels(every, optimizer_text, self._identity,
                                      without=aggregated)
        self.groups = []
        for rank in sorted({r.get("rank", 0) for r in measured}):
            self.groups += seed_groups([r for r in measured if r.get("rank", 0) == rank],
                                       context.per_seed)
        self.with_seeds = any(len(g) > 1 for g in self.groups)
        self.extra = ["Settings"] if self.settings else []
        self.columns = (["Executor", "Optimizer", *self.extra] +
                        (["Rank"] if self.multi_rank else []) +
                        (["Seeds"] if self.with_seeds else []))

    def _identity(self, record: dict) -> str:
        return f"{training_label(record)}|{self.settings.text(record)}|{record.get('rank', 0)}"

    def head(self, record: dict) -> list:
        return ([record["configuration"]["executor"], self.labels[id(record)]] +
                ([self.settings.text(record)] if self.settings else []) +
                ([record.get("rank", 0)] if self.multi_rank else []))

    def head_of(self, group: list[dict]) -> list:
        return self.head(group[0]) + ([seeds_text(group)] if self.with_seeds else [])


def _group_tables(layout: _Layout, context: ReportContext) -> list[Table]:
    """The training table, how the time to target adds up, and where an epoch's time
    goes: one row per group of runs each, where it has something to show."""
    table = _training_table(layout)
    explained = _explained_table(layout)
    phases = Table("Level 2 — where an epoch's time goes (medians over epochs)",
                   layout.columns + ["Data loading", "Optimizer steps", "Validation",
                                     "Steps per epoch", "Time per step"])
    for group in layout.groups:
        head = layout.head_of(group)
        table.rows.append(head + _training_cells(group, context))
        parts = _explained_cells(group)
        if parts is not None:
            explained.rows.append(head + parts)
        epochs = _phase_cells(group)
        if epochs is not None:
            phases.rows.append(head + epochs)
    return [t for t in (table, explained, phases) if t.rows]


def _training_table(layout: _Layout) -> Table:
    note = ("Every configuration trains the same ONNX model from the same initial weights "
            "on the same minibatches (same seeded sampler). 'native' optimizers are the "
            "executor framework's own (torch.optim, Keras); 'reference' is Deep500's NumPy "
            "optimizer driving that executor. Epoch time: the fastest, median and slowest "
            "epoch (validation included). Time to target: wall time (validation included) "
            "until the test accuracy first reaches the target, with the epoch; the next "
            "table shows how it adds up. Divergence: the largest relative L2 distance of "
            "all parameters from the reference optimizer on the reference executor over "
            "the compared steps.")
    if layout.with_seeds:
        note += (" Runs that differ only in their seed make one row: accuracies are the "
                 "mean ± the half-width of a Student-t 95% CI over the seeds; time to "
                 "target is the mean over the runs that reached it, with how many did, "
                 "and MLPerf Training's score (from 3 runs: the mean without the fastest "
                 "and slowest run; one run that missed the target counts as the slowest). "
                 "One row per seed: deep500 report DIR --per-seed.")
    return Table("Level 2 — training", layout.columns + [
        "Final test acc.", "Best test acc.", "Final train acc.",
        "Epoch time (min / median / max)", "Time to target", "Divergence from reference",
        "Flags", "Acceptance"], note=note)


def _explained_table(layout: _Layout) -> Table:
    return Table("Level 2 — how the time to target adds up", layout.columns + [
        "Epochs to target", "Time to target", "First epoch", "Later epochs (median each)",
        "Validation", "Data loading", "Optimizer steps", "Other"], note=(
        "Time to target = the wall time of every epoch up to and including the one whose "
        "validation pass first reached the target: first epoch + later epochs. The first "
        "epoch often takes longer (lazy initialisation, compilation, cold caches). "
        "Validation, data loading, optimizer steps and other (events, bookkeeping) split "
        "the same total." + (" With several seeds: means over the runs that reached the "
                             "target." if layout.with_seeds else "")))


def _training_cells(group: list[dict], context: ReportContext) -> list:
    """Accuracies, epoch times, time to target, divergence, flags and verdict."""
    first = group[0]
    target = summary(first, "TimeToAccuracy", "target")
    if len(group) == 1 and target is not None and summary(first, "TimeToAccuracy",
                                                           "reached"):
        to_target = (f"{fmt_time(summary(first, 'TimeToAccuracy', 'seconds'))} "
                     f"(epoch {summary(first, 'TimeToAccuracy', 'epochs')}, "
                     f"target {target:.0%})")
    else:
        to_target = time_to_target_text(
            [summary(r, "TimeToAccuracy", "seconds")
             if summary(r, "TimeToAccuracy", "reached") else None for r in group],
            target)
    divergences = [(summary(r, "TrajectoryDivergence", "max_relative_l2"),
                    summary(r, "TrajectoryDivergence", "steps")) for r in group]
    divergences = [d for d in divergences if d[0] is not None]
    divergence = ("n/a" if not divergences else
                  f"{fmt_number(max(d[0] for d in divergences))} "
                  f"({divergences[0][1]} steps)")
    return [
        _cell(group, [summary(r, "TestAccuracy", "final") for r in group], _percent),
        _cell(group, [summary(r, "TestAccuracy", "best") for r in group], _percent),
        _cell(group, [summary(r, "TrainingAccuracy", "final") for r in group], _percent),
        _spread(epoch_times(group)), to_target, divergence,
        _group_flags(group, context.ci_threshold), _group_verdict(group)]


def _explained_cells(group: list[dict]) -> list | None:
    """How the group's time to target adds up (None: no run reached it)."""
    parts, reached = _mean_parts(group)
    if parts is None:
        return None
    epochs = (f"{parts['epochs']:.0f}" if len(group) == 1 else
              f"{parts['epochs']:.3g} ({reached} of {len(group)} runs)")
    later = ("none" if parts["later_median"] is None else
             f"{fmt_time(parts['later'])} ({fmt_time(parts['later_median'])})")
    return [epochs, fmt_time(parts["total"]), fmt_time(parts["first"]), later,
            fmt_time(parts["validation"]), fmt_time(parts["data"]),
            fmt_time(parts["steps"]), fmt_time(parts["other"])]


def _phase_cells(group: list[dict]) -> list | None:
    """Medians over the group's epochs of each phase (None: no epoch completed)."""
    epochs = [e for r in group for e in completed_epochs(r)]
    if not epochs:
        return None

    def median(key):
        values = [e[key] for e in epochs if e.get(key) is not None]
        return stats.median(values) if values else None
    per_step = [t for e in epochs for t in e.get("step_times", [])]
    return [fmt_time(median("data_time")), fmt_time(median("step_time")),
            fmt_time(median("validation_time")), epochs[0].get("steps"),
            fmt_time(stats.median(per_step) if per_step else None)]


def _skipped_table(layout: _Layout, skipped: list[dict], context: ReportContext) -> Table:
    skipped_groups = seed_groups([r for r in skipped if r.get("rank", 0) == 0],
                                 context.per_seed)
    several = any(len(g) > 1 for g in skipped_groups)
    return Table("Level 2 — configurations not applicable",
                 ["Executor", "Optimizer", *layout.extra] +
                 (["Seeds"] if several else []) + ["Why"],
                 [layout.head(g[0])[:2 + len(layout.extra)] +
                  ([seeds_text(g)] if several else []) + [g[0]["reason"]]
                  for g in skipped_groups])
