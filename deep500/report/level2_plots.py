"""The figures of the level-2 section (training): accuracy and loss per epoch, the
training accuracy every k steps (``TrainingAccuracy: {every: k}``), the loss of every
step, time per epoch with its spread, time to target, where an epoch's time
goes, and the trajectory divergence from the reference optimizer (Fig. 11 of the
Deep500 paper).

One series per row of the section's table: the executor, the optimizer and every other
varied setting name it; runs of several seeds are drawn as their mean, shaded from the
lowest to the highest seed's value.
"""
from __future__ import annotations

import os
import statistics as stats

from deep500.report.plots import grouped_bars, line_panels, stacked_bars
from deep500.report.records import ReportContext, Settings, distinct_labels, metric, \
    summary
from deep500.report.seeds import mean_curve, mean_series, time_to_target_plot
from deep500.report.training_records import completed_epochs, epoch_times, short_label, \
    training_label


def plots(groups: list[list[dict]], output_dir: str, settings: Settings, labels: dict,
          context: ReportContext) -> list[tuple[str, str]]:
    """(caption, path) of every figure of rank 0's ``groups`` (runs that differ only in
    their seed); ``labels``: the optimizer's name in the table, per record."""
    groups = [g for g in groups if g[0].get("rank", 0) == 0]
    folder = os.path.join(output_dir, "plots")
    also = context.figure_format
    names = _series_names(groups, settings, context)
    name_of = {id(g[0]): names[id(g[0])] + (f" (mean of {len(g)} seeds)" if len(g) > 1
                                            else "") for g in groups}
    curves = [g for g in groups if any(completed_epochs(r) for r in g)]
    figures = []
    if curves:
        figures.append(_curves_plot(curves, name_of, folder, also))
        figures += _step_accuracy_plot(curves, name_of, folder, also)
        figures += _step_loss_plot(curves, name_of, folder, also)
    figures += _epoch_time_plot(groups, settings, labels, folder, also)
    figures += _time_to_target(groups, names, folder, also)
    figures += _phases_plot(groups, name_of, folder, also)
    figures += _divergence_plot(groups, names, folder, also)
    return figures


def _series_names(groups: list[list[dict]], settings: Settings,
                  context: ReportContext) -> dict:
    """The legend name of each group's first record: hyper-parameters only where the
    short names would not tell series apart."""
    firsts = [g[0] for g in groups]
    short = [settings.label(short_label(r), r) for r in firsts]
    legend = short_label if len(set(short)) == len(short) else training_label
    return distinct_labels(firsts, lambda r: settings.label(legend(r), r),
                           without=("seed",) if not context.per_seed else ())


def _curves_plot(curves: list[list[dict]], name_of: dict, folder: str, also) -> tuple:
    """Test accuracy, training loss and test loss per epoch."""
    panels, bands = [], []
    for title, ylabel, key in (("Test accuracy", "accuracy", "test_accuracy"),
                               ("Training loss (mean over the epoch)", "loss",
                                "train_loss"),
                               ("Test loss", "loss", "test_loss")):
        values, band = mean_series(
            curves, lambda r, key=key: [e.get(key) for e in completed_epochs(r)],
            lambda g: name_of[id(g[0])])
        panels.append((title, ylabel, values))
        bands.append(band)
    path = line_panels(os.path.join(folder, "level2_curves.png"),
                       "Training curves (per epoch)", panels, xlabel="epoch",
                       log_scale=(1, 2), also=also, bands=bands)
    return ("Accuracy and loss curves", path)


def step_accuracy_samples(record: dict) -> list[dict]:
    """The ``{"step", "epoch", "accuracy", "steps"}`` samples of a record's
    ``TrainingAccuracy(every=k)`` (empty without ``every``)."""
    entry = metric(record, "TrainingAccuracy")
    if entry is None or not entry.get("summary", {}).get("every"):
        return []
    return [s for s in entry.get("samples", []) if isinstance(s, dict) and "step" in s]


def _step_accuracy_plot(curves: list[list[dict]], name_of: dict, folder: str,
                        also) -> list[tuple]:
    return step_accuracy_plot(curves, name_of, os.path.join(
        folder, "level2_train_accuracy_steps.png"), also)


def step_accuracy_plot(groups: list[list[dict]], name_of: dict, path: str, also,
                       whose: str = "") -> list[tuple]:
    """Training accuracy sampled every k steps (``TrainingAccuracy: {every: k}``), the
    mean over a group's seeds at each sample, beside the per-epoch curves; ``whose``
    says whose predictions they are (e.g. " (rank 0's shard)")."""
    series, bands, every = {}, {}, set()
    for group in groups:
        sampled = [s for s in (step_accuracy_samples(r) for r in group) if s]
        if not sampled:
            continue
        every.update(summary(r, "TrainingAccuracy", "every") for r in group
                     if step_accuracy_samples(r))
        means, lows, highs = mean_curve([[s["accuracy"] for s in run] for run in sampled])
        longest = max(sampled, key=len)
        name = name_of[id(group[0])]
        series[name] = ([s["step"] for s in longest], means)
        if len(sampled) > 1:
            bands[name] = (lows, highs)
    if not series:
        return []
    k = f"{every.pop()} steps" if len(every) == 1 else "k steps (each series its own k)"
    path = line_panels(path, f"Training accuracy every {k}{whose}",
                       [("Training accuracy (over each window of steps)", "accuracy",
                         series)], xlabel="step", also=also, bands=[bands])
    return [(f"Training accuracy every {k}{whose}: the accuracy of the predictions in "
             f"each window of steps (TrainingAccuracy with every)", path)]


def _step_loss_plot(curves: list[list[dict]], name_of: dict, folder: str,
                    also) -> list[tuple]:
    step_losses, _ = mean_series(
        curves, lambda r: [loss for e in completed_epochs(r)
                           for loss in e.get("step_losses", [])],
        lambda g: name_of[id(g[0])])
    if not any(v[1] for v in step_losses.values()):
        return []
    path = line_panels(os.path.join(folder, "level2_step_loss.png"),
                       "Training loss per step", [("Loss", "loss", step_losses)],
                       xlabel="step", log_scale=(0,), also=also)
    return [("Loss of every training step", path)]


def _epoch_time_plot(groups: list[list[dict]], settings: Settings, labels: dict,
                     folder: str, also) -> list[tuple]:
    """Median epoch time per optimizer (groups) and executor (series), whiskers from
    the fastest to the slowest epoch."""
    optimizers = list(dict.fromkeys(labels[id(g[0])] for g in groups))
    executors = list(dict.fromkeys(settings.label(g[0]["configuration"]["executor"], g[0])
                                   for g in groups))
    lookup = {(settings.label(g[0]["configuration"]["executor"], g[0]), labels[id(g[0])]): g
              for g in groups}
    medians, whiskers = {}, {}
    for executor in executors:
        medians[executor], whiskers[executor] = [], []
        for optimizer in optimizers:
            times = epoch_times(lookup.get((executor, optimizer), []))
            medians[executor].append(stats.median(times) if times else None)
            whiskers[executor].append((min(times), max(times)) if times else (None, None))
    if not any(v is not None for values in medians.values() for v in values):
        return []
    path = grouped_bars(os.path.join(folder, "level2_epoch_time.png"),
                        "Time per epoch (median; whiskers: fastest and slowest epoch)",
                        optimizers, medians, whiskers, xlabel="seconds", also=also)
    return [("Time per epoch, per optimizer and executor, with its spread", path)]


def _time_to_target(groups: list[list[dict]], names: dict, folder: str,
                    also) -> list[tuple]:
    reaching = [(g, [summary(r, "TimeToAccuracy", "seconds") for r in g
                     if summary(r, "TimeToAccuracy", "reached")]) for g in groups]
    reaching = [(g, times) for g, times in reaching if times]
    if not reaching:
        return []
    return [time_to_target_plot(
        os.path.join(folder, "level2_time_to_target.png"),
        [names[id(g[0])] for g, _ in reaching], [times for _, times in reaching],
        [len(g) for g, _ in reaching], summary(reaching[0][0][0], "TimeToAccuracy",
                                               "target"), also)]


def _phases_plot(groups: list[list[dict]], name_of: dict, folder: str,
                 also) -> list[tuple]:
    """Data loading, optimizer steps and validation of the median epoch."""
    with_epochs = [g for g in groups if any(completed_epochs(r) for r in g)]
    if not with_epochs:
        return []

    def median(group, key):
        values = [e[key] for r in group for e in completed_epochs(r)
                  if e.get(key) is not None]
        return stats.median(values) if values else 0.0
    segments = {"data loading": [median(g, "data_time") for g in with_epochs],
                "optimizer steps": [median(g, "step_time") for g in with_epochs],
                "validation": [median(g, "validation_time") for g in with_epochs]}
    path = stacked_bars(os.path.join(folder, "level2_phases.png"),
                        "Where an epoch's time goes",
                        [name_of[id(g[0])] for g in with_epochs], segments,
                        xlabel="seconds (median epoch)", also=also)
    return [("Per-phase time of an epoch", path)]


def _divergence_plot(groups: list[list[dict]], names: dict, folder: str,
                     also) -> list[tuple]:
    """Relative L2 distance of all parameters and the largest difference of any
    parameter from the reference optimizer, per compared step."""
    diverging = [g for g in groups if metric(g[0], "TrajectoryDivergence")]
    if not diverging:
        return []
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
    return [("Trajectory divergence (zero — identical to the reference — is not "
             "drawn on the log scale)", path)]
