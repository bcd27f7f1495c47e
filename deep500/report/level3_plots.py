"""The figures of the level-3 section (distributed training): accuracy and loss against
epochs (and rank 0's training accuracy every k steps, with ``TrainingAccuracy: {every:
k}``) and against time, time to target, where an epoch's time goes, bytes sent per
epoch (measured and by the scheme's model), the sizes of the messages sent (A. Catalán's
thesis, Fig. 5.13), replica divergence and staleness.

One series per row of the section's main table (scheme and every other varied
setting); runs of several seeds are drawn as their mean, shaded from the lowest to the
highest seed's value; bar charts show the lowest seed.
"""
from __future__ import annotations

import os

from deep500.lv3_distributed.message_sizes import bin_label
from deep500.report.distributed_records import bytes_per_epoch, distributed, \
    global_epochs, message_sizes, ordered_phases, phase_medians, replica_divergence, \
    seconds_to_target, staleness, training_seconds
from deep500.report.level2_plots import step_accuracy_plot
from deep500.report.plots import grouped_bars, line_panels, stacked_bars
from deep500.report.records import ReportContext, Settings, summary
from deep500.report.seeds import mean_curve, mean_series, time_to_target_plot


def plots(groups: list[list[dict]], output_dir: str, settings: Settings, labels: dict,
          context: ReportContext) -> list[tuple[str, str]]:
    """(caption, path) of every figure of rank 0's ``groups`` (runs that differ only in
    their seed); ``labels``: the scheme's name in the table, per record."""
    folder = os.path.join(output_dir, "plots")
    also = context.figure_format
    groups = [g for g in groups if global_epochs(g[0])]
    if not groups:
        return []
    names = {id(g[0]): settings.label(labels[id(g[0])], g[0]) + (
        f" (mean of {len(g)} seeds)" if len(g) > 1 else "") for g in groups}
    figures = [_against_epochs(groups, names, folder, also)]
    figures += step_accuracy_plot(groups, names, os.path.join(
        folder, "level3_train_accuracy_steps.png"), also, whose=" (rank 0's shard)")
    figures.append(_against_time(groups, names, folder, also))
    figures += _time_to_target(groups, settings, labels, folder, also)
    firsts = [g[0] for g in groups]
    bars = [settings.label(labels[id(r)], r) for r in firsts]
    figures.append(_phases(firsts, bars, folder, also))
    figures += _bytes(firsts, bars, folder, also)
    figures += _message_sizes(firsts, bars, folder, also)
    figures += _divergence(firsts, bars, folder, also)
    figures += _staleness(firsts, bars, folder, also)
    return figures


def _against_epochs(groups: list[list[dict]], names: dict, folder: str, also) -> tuple:
    def per_epoch(key):
        return mean_series(groups, lambda r: [e.get(key) for e in global_epochs(r)],
                           lambda g: names[id(g[0])])
    accuracy, accuracy_band = per_epoch("test_accuracy")
    loss, loss_band = per_epoch("train_loss")
    path = line_panels(os.path.join(folder, "level3_accuracy_epochs.png"),
                       "Distributed training against epochs",
                       [("Test accuracy (rank 0)", "accuracy", accuracy),
                        ("Training loss (all ranks)", "loss", loss)],
                       xlabel="epoch", log_scale=(1,), also=also,
                       bands=[accuracy_band, loss_band])
    return ("Accuracy and loss against epochs, per scheme", path)


def _against_time(groups: list[list[dict]], names: dict, folder: str, also) -> tuple:
    """Rank 0's test accuracy against the slowest rank's training time (validation
    excluded), accumulated over epochs."""
    against_time = {}
    for group in groups:
        elapsed_curves, accuracy_curves = [], []
        for record in group:
            seconds, elapsed = [], 0.0
            for value in training_seconds(record):
                elapsed += value
                seconds.append(elapsed)
            elapsed_curves.append(seconds)
            accuracy_curves.append([e.get("test_accuracy")
                                    for e in global_epochs(record)][:len(seconds)])
        xs, _, _ = mean_curve(elapsed_curves)
        ys, _, _ = mean_curve(accuracy_curves)
        against_time[names[id(group[0])]] = (xs, ys[:len(xs)])
    path = line_panels(os.path.join(folder, "level3_accuracy_time.png"),
                       "Test accuracy (rank 0) against training time",
                       [("Training time of the slowest rank (validation excluded)",
                         "accuracy", against_time)], xlabel="seconds", also=also)
    return ("Accuracy against time, per scheme", path)


def _time_to_target(groups: list[list[dict]], settings: Settings, labels: dict,
                    folder: str, also) -> list[tuple]:
    reaching = [(g, [t for t in (seconds_to_target(r)[0] for r in g) if t is not None])
                for g in groups]
    reaching = [(g, times) for g, times in reaching if times]
    if not reaching:
        return []
    return [time_to_target_plot(
        os.path.join(folder, "level3_time_to_target.png"),
        [settings.label(labels[id(g[0])], g[0]) for g, _ in reaching],
        [times for _, times in reaching], [len(g) for g, _ in reaching],
        summary(reaching[0][0][0], "TimeToAccuracy", "target"), also)]


def _phases(records: list[dict], bars: list[str], folder: str, also) -> tuple:
    medians = [phase_medians(r) for r in records]
    path = stacked_bars(os.path.join(folder, "level3_phases.png"),
                        "Where an epoch's time goes (mean over ranks)", bars,
                        {name: [m.get(name) or 0.0 for m in medians]
                         for name in ordered_phases({n for m in medians for n in m})},
                        xlabel="seconds (median epoch)", also=also)
    return ("Per-phase time of an epoch, per scheme", path)


def _bytes(records: list[dict], bars: list[str], folder: str, also) -> list[tuple]:
    """Bytes sent per epoch by the busiest rank, measured and by the analytic model."""
    sent = [max(bytes_per_epoch(r, "bytes_sent"), default=0) for r in records]
    model = [max((a or {}).get("bytes_sent", 0) or 0
                 for a in distributed(r).get("analytic_per_epoch") or [None])
             for r in records]
    if not any(sent) and not any(model):
        return []
    path = grouped_bars(os.path.join(folder, "level3_bytes.png"),
                        "Bytes sent per epoch by the busiest rank", bars,
                        {"measured": [v / 1e6 for v in sent],
                         "analytic model": [v / 1e6 for v in model]}, xlabel="MB",
                        also=also)
    return [("Bytes sent per rank per epoch, measured and by the scheme's model", path)]


def _message_sizes(records: list[dict], bars: list[str], folder: str, also) -> list[tuple]:
    """Messages sent, and their bytes, per power-of-two size bin: one bar per scheme."""
    histograms = {name: message_sizes(r) for r, name in zip(records, bars)}
    histograms = {k: v for k, v in histograms.items() if v}
    if not histograms:
        return []
    keys = sorted({k for h in histograms.values() for k in h if k != "unsized"})
    if any("unsized" in h for h in histograms.values()):
        keys.append("unsized")
    groups = [bin_label(k) if k != "unsized" else "sizes not modelled" for k in keys]
    figures = []
    for index, (what, unit, scale) in enumerate((("Messages", "messages", 1),
                                                 ("Bytes", "MB", 1e-6))):
        path = grouped_bars(
            os.path.join(folder, f"level3_message_sizes_{unit.lower()}.png"),
            f"{what} sent per message size (all ranks and epochs)", groups,
            {name: [h.get(k, (0, 0))[index] * scale for k in keys]
             for name, h in histograms.items()},
            xlabel=unit, log_scale=index == 0, also=also)
        figures.append((f"{what} sent per message size, per scheme (power-of-two bins)",
                        path))
    return figures


def _divergence(records: list[dict], bars: list[str], folder: str, also) -> list[tuple]:
    drifting = {}
    for record, name in zip(records, bars):
        values = replica_divergence(global_epochs(record))
        if any(values):
            drifting[name] = (list(range(1, len(values) + 1)), values)
    if not drifting:
        return []
    path = line_panels(os.path.join(folder, "level3_divergence.png"),
                       "Replica divergence", [("Largest over ranks",
                                               "‖w_r − mean w‖₂", drifting)],
                       xlabel="epoch", log_scale=(0,), also=also)
    return [("How far replicas drift apart (inconsistent schemes)", path)]


def _staleness(records: list[dict], bars: list[str], folder: str, also) -> list[tuple]:
    histograms = {name: staleness(r) for r, name in zip(records, bars)}
    histograms = {k: v for k, v in histograms.items() if v}
    if not histograms:
        return []
    values = sorted({s for h in histograms.values() for s in h})
    path = grouped_bars(os.path.join(folder, "level3_staleness.png"),
                        "Staleness of applied updates (all ranks and epochs)",
                        [f"staleness {s}" for s in values],
                        {k: [h.get(s, 0) for s in values] for k, h in histograms.items()},
                        xlabel="updates", also=also)
    return [("Staleness histogram", path)]
