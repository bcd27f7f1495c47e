"""Level-2 section of a report: training runs across executors and optimizers (and every
other varied setting) — accuracy, time per epoch with its spread, time-to-accuracy and
how it adds up (epochs × time per epoch, validation and first-epoch warm-up included),
time per phase, loss and accuracy curves, and the trajectory divergence of each
optimizer from the reference one (Fig. 11 of the Deep500 paper).

Runs that differ only in their seed are one row: means with Student-t 95% CIs, and
time-to-accuracy as MLPerf scores it (:mod:`deep500.report.seeds`); ``per_seed`` shows
one row per run.
"""
from __future__ import annotations

import os
import statistics as stats

from deep500.report.plots import grouped_bars, line_panels, stacked_bars
from deep500.report.records import ReportContext, Settings, distinct_labels, flags, \
    measurement_warnings, metric, of_level, summary, verdict
from deep500.report.seeds import fmt_mean_ci, mean_curve, seed_groups, seeds_text, \
    time_to_target_plot, time_to_target_text
from deep500.report.tables import Table, fmt_number, fmt_time

SHOWN = ("executor", "optimizer")


def _optimizer(record: dict) -> str:
    optimizer = record["configuration"]["optimizer"]
    implementation = optimizer.get("implementation", "native")
    return f"{optimizer['label']} [{implementation}]"


def _label(record: dict) -> str:
    return f"{record['configuration']['executor']} · {_optimizer(record)}"


def _short_label(record: dict) -> str:
    """For plot legends: the hyper-parameters are in the tables (and are added where
    two series would otherwise share a name)."""
    optimizer = record["configuration"]["optimizer"]
    return (f"{record['configuration']['executor']} · {optimizer['type']} "
            f"[{optimizer.get('implementation', 'native')}]")


def _all_epochs(record: dict) -> list[dict]:
    details = record.get("result", {}).get("details", {})
    return list((details.get("statistics") or {}).get("epochs", []))


def _epochs(record: dict) -> list[dict]:
    return [e for e in _all_epochs(record) if e.get("completed", True)]


def _epoch_times(records: list[dict]) -> list[float]:
    return [e["wall_time"] for r in records for e in _epochs(r)
            if e.get("wall_time") is not None]


def _median_epoch_time(record: dict):
    times = _epoch_times([record])
    return stats.median(times) if times else None


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
    epochs = _all_epochs(record)[:count]
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
    measured = of_level(records, 2, "measurement")
    failed = of_level(records, 2, "error")
    skipped = of_level(records, 2, "skipped")
    every = measured + failed + skipped
    aggregated = () if context.per_seed else ("seed",)
    settings = Settings(every, SHOWN, context.manifest, aggregated=aggregated)
    multi_rank = any(r.get("size", 1) > 1 for r in records)

    def identity(record):
        return f"{_label(record)}|{settings.text(record)}|{record.get('rank', 0)}"
    labels = distinct_labels(every, _optimizer, identity, without=aggregated)
    groups = []
    for rank in sorted({r.get("rank", 0) for r in measured}):
        groups += seed_groups([r for r in measured if r.get("rank", 0) == rank],
                              context.per_seed)
    with_seeds = any(len(g) > 1 for g in groups)
    extra = ["Settings"] if settings else []

    def head(record):
        return ([record["configuration"]["executor"], labels[id(record)]] +
                ([settings.text(record)] if settings else []) +
                ([record.get("rank", 0)] if multi_rank else []))

    def head_of(group):
        return head(group[0]) + ([seeds_text(group)] if with_seeds else [])
    columns = (["Executor", "Optimizer", *extra] + (["Rank"] if multi_rank else []) +
               (["Seeds"] if with_seeds else []))
    note = ("Every configuration trains the same ONNX model from the same initial weights "
            "on the same minibatches (same seeded sampler). 'native' optimizers are the "
            "executor framework's own (torch.optim, Keras); 'reference' is Deep500's NumPy "
            "optimizer driving that executor. Epoch time: the fastest, median and slowest "
            "epoch (validation included). Time to target: wall time (validation included) "
            "until the test accuracy first reaches the target, with the epoch; the next "
            "table shows how it adds up. Divergence: the largest relative L2 distance of "
            "all parameters from the reference optimizer on the reference executor over "
            "the compared steps.")
    if with_seeds:
        note += (" Runs that differ only in their seed make one row: accuracies are the "
                 "mean ± the half-width of a Student-t 95% CI over the seeds; time to "
                 "target is the mean over the runs that reached it, with how many did, "
                 "and MLPerf Training's score (from 3 runs: the mean without the fastest "
                 "and slowest run; one run that missed the target counts as the slowest). "
                 "One row per seed: deep500 report DIR --per-seed.")
    table = Table("Level 2 — training", columns + [
        "Final test acc.", "Best test acc.", "Final train acc.",
        "Epoch time (min / median / max)", "Time to target", "Divergence from reference",
        "Flags", "Acceptance"], note=note)
    explained = Table("Level 2 — how the time to target adds up", columns + [
        "Epochs to target", "Time to target", "First epoch", "Later epochs (median each)",
        "Validation", "Data loading", "Optimizer steps", "Other"], note=(
        "Time to target = the wall time of every epoch up to and including the one whose "
        "validation pass first reached the target: first epoch + later epochs. The first "
        "epoch often takes longer (lazy initialisation, compilation, cold caches). "
        "Validation, data loading, optimizer steps and other (events, bookkeeping) split "
        "the same total." + (" With several seeds: means over the runs that reached the "
                             "target." if with_seeds else "")))
    phases = Table("Level 2 — where an epoch's time goes (medians over epochs)",
                   columns + ["Data loading", "Optimizer steps", "Validation",
                              "Steps per epoch", "Time per step"])
    for group in groups:
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
        table.rows.append(head_of(group) + [
            _cell(group, [summary(r, "TestAccuracy", "final") for r in group], _percent),
            _cell(group, [summary(r, "TestAccuracy", "best") for r in group], _percent),
            _cell(group, [summary(r, "TrainingAccuracy", "final") for r in group], _percent),
            _spread(_epoch_times(group)), to_target, divergence,
            _group_flags(group, context.ci_threshold), _group_verdict(group)])
        parts, reached = _mean_parts(group)
        if parts is not None:
            epochs = (f"{parts['epochs']:.0f}" if len(group) == 1 else
                      f"{parts['epochs']:.3g} ({reached} of {len(group)} runs)")
            later = ("none" if parts["later_median"] is None else
                     f"{fmt_time(parts['later'])} ({fmt_time(parts['later_median'])})")
            explained.rows.append(head_of(group) + [
                epochs, fmt_time(parts["total"]), fmt_time(parts["first"]), later,
                fmt_time(parts["validation"]), fmt_time(parts["data"]),
                fmt_time(parts["steps"]), fmt_time(parts["other"])])
        epochs = [e for r in group for e in _epochs(r)]
        if epochs:
            def median(key):
                values = [e[key] for e in epochs if e.get(key) is not None]
                return stats.median(values) if values else None
            per_step = [t for e in epochs for t in e.get("step_times", [])]
            phases.rows.append(head_of(group) + [
                fmt_time(median("data_time")), fmt_time(median("step_time")),
                fmt_time(median("validation_time")), epochs[0].get("steps"),
                fmt_time(stats.median(per_step) if per_step else None)])
    tables = [t for t in (table, explained, phases) if t.rows]
    if skipped:
        skipped_groups = seed_groups([r for r in skipped if r.get("rank", 0) == 0],
                                     context.per_seed)
        several = any(len(g) > 1 for g in skipped_groups)
        tables.append(Table("Level 2 — configurations not applicable",
                            ["Executor", "Optimizer", *extra] +
                            (["Seeds"] if several else []) + ["Why"],
                            [head(g[0])[:2 + len(extra)] +
                             ([seeds_text(g)] if several else []) + [g[0]["reason"]]
                             for g in skipped_groups]))
    if failed:
        tables.append(Table("Level 2 — configurations that failed",
                            ["Executor", "Optimizer", *extra, "Seed", "Rank", "Error"],
                            [head(r)[:2 + len(extra)] + [
                                r["configuration"].get("seed"), r.get("rank", 0),
                                r["error"]] for r in failed]))
    plots = _plots(groups, output_dir, settings, labels, context) if measured else []
    return {"tables": tables, "plots": plots, "measured": len(measured),
            "failed": len(failed),
            "warnings": measurement_warnings(
                measured, lambda r: settings.label(_label(r), r) + (
                    f" (seed {r['configuration'].get('seed')})" if with_seeds else "")),
            "acceptance_failures": sum(1 for r in measured if not r.get("passed", True))}


def _plots(groups: list[list[dict]], output_dir: str, settings: Settings, labels: dict,
           context: ReportContext) -> list[tuple[str, str]]:
    """One series per row of the table: the executor, the optimizer and every other
    varied setting name it; runs of several seeds are drawn as their mean, shaded from
    the lowest to the highest seed's value."""
    groups = [g for g in groups if g[0].get("rank", 0) == 0]
    folder = os.path.join(output_dir, "plots")
    also = context.figure_format
    plots = []
    firsts = [g[0] for g in groups]
    short = [settings.label(_short_label(r), r) for r in firsts]
    # hyper-parameters only where the short names would not tell series apart
    legend = _short_label if len(set(short)) == len(short) else _label
    names = distinct_labels(firsts, lambda r: settings.label(legend(r), r),
                            without=("seed",) if not context.per_seed else ())
    name_of = {id(g[0]): names[id(g[0])] + (f" (mean of {len(g)} seeds)" if len(g) > 1
                                            else "") for g in groups}
    curves = [g for g in groups if any(_epochs(r) for r in g)]
    if curves:
        def series(key):
            out, bands = {}, {}
            for group in curves:
                means, lows, highs = mean_curve([[e.get(key) for e in _epochs(r)]
                                                  for r in group])
                name = name_of[id(group[0])]
                out[name] = (list(range(1, len(means) + 1)), means)
                if len(group) > 1:
                    bands[name] = (lows, highs)
            return out, bands
        panels, bands = [], []
        for title, ylabel, key in (("Test accuracy", "accuracy", "test_accuracy"),
                                   ("Training loss (mean over the epoch)", "loss",
                                    "train_loss"),
                                   ("Test loss", "loss", "test_loss")):
            values, band = series(key)
            panels.append((title, ylabel, values))
            bands.append(band)
        path = line_panels(os.path.join(folder, "level2_curves.png"),
                           "Training curves (per epoch)", panels, xlabel="epoch",
                           log_scale=(1, 2), also=also, bands=bands)
        plots.append(("Accuracy and loss curves", path))
        step_losses = {}
        for group in curves:
            means, _, _ = mean_curve([[loss for e in _epochs(r)
                                        for loss in e.get("step_losses", [])]
                                       for r in group])
            step_losses[name_of[id(group[0])]] = (list(range(1, len(means) + 1)), means)
        if any(v[1] for v in step_losses.values()):
            path = line_panels(os.path.join(folder, "level2_step_loss.png"),
                               "Training loss per step", [("Loss", "loss", step_losses)],
                               xlabel="step", log_scale=(0,), also=also)
            plots.append(("Loss of every training step", path))
    optimizers = list(dict.fromkeys(labels[id(g[0])] for g in groups))
    executors = list(dict.fromkeys(settings.label(g[0]["configuration"]["executor"], g[0])
                                   for g in groups))
    lookup = {(settings.label(g[0]["configuration"]["executor"], g[0]), labels[id(g[0])]): g
              for g in groups}
    epoch_times, whiskers = {}, {}
    for executor in executors:
        epoch_times[executor], whiskers[executor] = [], []
        for optimizer in optimizers:
            times = _epoch_times(lookup.get((executor, optimizer), []))
            epoch_times[executor].append(stats.median(times) if times else None)
            whiskers[executor].append((min(times), max(times)) if times else (None, None))
    if any(v is not None for values in epoch_times.values() for v in values):
        path = grouped_bars(os.path.join(folder, "level2_epoch_time.png"),
                            "Time per epoch (median; whiskers: fastest and slowest epoch)",
                            optimizers, epoch_times, whiskers, xlabel="seconds", also=also)
        plots.append(("Time per epoch, per optimizer and executor, with its spread", path))
    reaching = [(g, [summary(r, "TimeToAccuracy", "seconds") for r in g
                     if summary(r, "TimeToAccuracy", "reached")]) for g in groups]
    reaching = [(g, times) for g, times in reaching if times]
    if reaching:
        plots.append(time_to_target_plot(
            os.path.join(folder, "level2_time_to_target.png"),
            [names[id(g[0])] for g, _ in reaching], [times for _, times in reaching],
            [len(g) for g, _ in reaching], summary(reaching[0][0][0], "TimeToAccuracy",
                                                   "target"), also))
    with_epochs = [g for g in groups if any(_epochs(r) for r in g)]
    if with_epochs:
        def median(group, key):
            values = [e[key] for r in group for e in _epochs(r) if e.get(key) is not None]
            return stats.median(values) if values else 0.0
        segments = {"data loading": [median(g, "data_time") for g in with_epochs],
                    "optimizer steps": [median(g, "step_time") for g in with_epochs],
                    "validation": [median(g, "validation_time") for g in with_epochs]}
        path = stacked_bars(os.path.join(folder, "level2_phases.png"),
                            "Where an epoch's time goes",
                            [name_of[id(g[0])] for g in with_epochs], segments,
                            xlabel="seconds (median epoch)", also=also)
        plots.append(("Per-phase time of an epoch", path))
    diverging = [g for g in groups if metric(g[0], "TrajectoryDivergence")]
    if diverging:
        relative, linf = {}, {}
        for group in diverging:
            record = group[0]
            samples = metric(record, "TrajectoryDivergence")["samples"]
            steps = [s["step"] for s in samples]
            name = names[id(record)] + (f" (seed {record['configuration'].get('seed')})"
                                        if len(group) > 1 else "")
            relative[name] = (steps, [s["relative_l2"] for s in samples])
            linf[name] = (steps, [s["total_linf"] for s in samples])
        path = line_panels(os.path.join(folder, "level2_divergence.png"),
                           "Trajectory divergence from the reference optimizer "
                           "(reference executor)",
                           [("Relative L2 distance of all parameters",
                             "‖w − w_ref‖₂ / ‖w_ref‖₂", relative),
                            ("Largest difference of any parameter", "max |w − w_ref|",
                             linf)],
                           xlabel="step", log_scale=(0, 1), also=also)
        plots.append(("Trajectory divergence (zero — identical to the reference — is not "
                      "drawn on the log scale)", path))
    return plots
