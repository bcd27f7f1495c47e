"""Level-2 metrics: each turns the :class:`TrainingStatistics` of a run into a
:class:`MetricResult` whose samples are the curve (per epoch or per step) and whose
summary holds the headline numbers.

Accuracies are fractions in [0, 1]. ``TimeToAccuracy`` follows the time-to-accuracy
methodology of DAWNBench (Coleman et al., "DAWNBench: An End-to-End Deep Learning
Benchmark and Competition", NIPS ML Systems Workshop 2017): the wall time until the
model first reaches a target test accuracy.
"""
from __future__ import annotations

from numbers import Integral

from deep500.lv2_training.training_statistics import TrainingStatistics
from deep500.utils.errors import Deep500Error
from deep500.utils.metric import MetricResult, TestMetric



def accuracy_target(who: str, target, on: str) -> tuple[float, str]:
    """``(target, on)`` checked: an accuracy ``target`` in [0, 1] reached ``on`` the
    validation pass (``"test"``) or the training steps (``"train"``); ``who`` names the
    caller in the error."""
    if on not in ("test", "train"):
        raise Deep500Error(f"{who}(on=...) is 'test' or 'train', got {on!r}")
    if not 0.0 <= float(target) <= 1.0:
        raise Deep500Error(f"{who}: target is a fraction in [0, 1], got {target}")
    return float(target), on

class TrainingMetric(TestMetric):
    """Base class: ``measure_training(statistics)`` computes the result after training.
    ``d5.test_training`` calls it; ``measure(statistics)`` does the same."""

    def measure_training(self, statistics: TrainingStatistics) -> MetricResult:
        raise NotImplementedError

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        if not isinstance(inputs, TrainingStatistics):
            raise Deep500Error(f"{self.name} measures a training run: pass its "
                               f"TrainingStatistics (e.g. d5.test_training(..., "
                               f"metrics=[d5.{self.name}()]))")
        return self.measure_training(inputs)


def _accuracy_result(name: str, values: list, what: str) -> MetricResult:
    measured = [(i, a) for i, a in enumerate(values) if a is not None]
    if not measured:
        return MetricResult(name, {"final": None, "best": None, "best_epoch": None,
                                   "epochs": len(values)}, "final", None, list(values),
                            warnings=[f"no {what} accuracy was measured (no epochs, no "
                                      f"labels{', no validation set' if what == 'test' else ''}"
                                      f" or no network output)"])
    best_epoch, best = max(measured, key=lambda item: item[1])
    return MetricResult(name, {"final": values[-1], "best": best, "best_epoch": best_epoch,
                               "epochs": len(values)}, "final", None, list(values))


class TrainingAccuracy(TrainingMetric):
    """Training accuracy per epoch, counted on the fly from the training steps' outputs
    (so it lags the parameters at the end of the epoch). Summary: ``final``, ``best``,
    ``best_epoch`` (0-based); samples: one value per epoch.

    ``every=k`` also samples it every k training steps, as the Deep500 paper does
    (Ben-Nun et al., IPDPS 2019): sample j is the accuracy over the predictions of
    steps (j-1)k+1 .. jk of the run (counted over all epochs, so a window may span the
    end of one; a run whose step count k does not divide ends with a shorter window).
    The samples are then ``{"step", "epoch", "accuracy", "steps"}``: the steps taken
    at the sample, the (0-based) epoch of its last step, the accuracy (``None`` for a
    window without labels) and the steps in the window; the summary adds ``every``,
    ``sampled`` (samples taken), ``last_window`` (the accuracy of the last one) and
    ``per_epoch`` (the per-epoch values that are the samples without ``every``).
    """

    fields = ("final", "best", "best_epoch", "epochs", "every", "sampled", "last_window",
              "per_epoch")  # the summary's keys (the last four with every=k)

    def __init__(self, every: int | None = None):
        if every is not None and (isinstance(every, bool) or
                                  not isinstance(every, Integral) or every < 1):
            raise Deep500Error(f"TrainingAccuracy(every=...) is a number of training "
                               f"steps >= 1, got {every!r}")
        self.every = None if every is None else int(every)

    def measure_training(self, statistics):
        result = _accuracy_result(self.name, statistics.train_accuracies, "training")
        if self.every is None:
            return result
        samples = step_accuracy_samples(statistics, self.every)
        result.summary.update(every=self.every, sampled=len(samples),
                              last_window=samples[-1]["accuracy"] if samples else None,
                              per_epoch=list(result.samples))
        result.samples = samples
        result.conditions = {**result.conditions, "every": self.every}
        if statistics.steps and not samples:
            result.warnings.append(f"no per-step accuracy was recorded (statistics "
                                   f"written before step_correct existed), so none is "
                                   f"sampled every {self.every} steps")
        return result


def step_accuracy_samples(statistics: TrainingStatistics, every: int) -> list[dict]:
    """The training accuracy over each window of ``every`` consecutive steps of the run
    (see :class:`TrainingAccuracy`); empty when the epochs hold no per-step counts."""
    samples, correct, counted, in_window, step = [], 0, 0, 0, 0

    def close(epoch):
        samples.append({"step": step, "epoch": epoch,
                        "accuracy": correct / counted if counted else None,
                        "steps": in_window})

    epoch = None
    for record in statistics.epochs:
        if len(record.step_correct) != record.steps or \
                len(record.step_counted) != record.steps:
            return []  # no (or incomplete) per-step counts: nothing to sample from
        epoch = record.epoch
        for hits, labelled in zip(record.step_correct, record.step_counted):
            step += 1
            in_window += 1
            correct += hits
            counted += labelled
            if in_window == every:
                close(epoch)
                correct = counted = in_window = 0
    if in_window:
        close(epoch)
    return samples


class TestAccuracy(TrainingMetric):
    """Test accuracy of the validation pass after each epoch. Summary: ``final``,
    ``best``, ``best_epoch`` (0-based); samples: one value per epoch."""

    fields = ("final", "best", "best_epoch", "epochs")  # the summary's keys

    def measure_training(self, statistics):
        return _accuracy_result(self.name, statistics.test_accuracies, "test")


class TimeToAccuracy(TrainingMetric):
    """Wall time and epochs until the accuracy (``on="test"`` or ``"train"``) first
    reaches ``target``, measured at the end of each epoch.

    Summary: ``reached`` (bool), ``seconds`` (cumulative epoch wall time, validation
    passes included; ``None`` if not reached), ``training_seconds`` (the same without
    validation passes), ``epochs`` (epochs needed), ``steps``, ``best`` accuracy.
    Samples: ``{"epoch", "seconds", "accuracy"}`` per epoch.
    """

    fields = ("target", "on", "reached", "seconds", "training_seconds", "epochs", "steps",
              "best")  # the summary's keys

    def __init__(self, target: float, on: str = "test"):
        self.target, self.on = accuracy_target("TimeToAccuracy", target, on)

    def measure_training(self, statistics):
        seconds = training_seconds = 0.0
        steps = 0
        samples, reached = [], None
        for record in statistics.epochs:
            seconds += record.wall_time
            training_seconds += record.wall_time - record.validation_time
            steps += record.steps
            accuracy = record.test_accuracy if self.on == "test" else record.train_accuracy
            samples.append({"epoch": record.epoch, "seconds": seconds, "accuracy": accuracy})
            if reached is None and accuracy is not None and accuracy >= self.target:
                reached = {"seconds": seconds, "training_seconds": training_seconds,
                           "epochs": len(samples), "steps": steps}
        accuracies = [s["accuracy"] for s in samples if s["accuracy"] is not None]
        best = max(accuracies) if accuracies else None
        summary = {"target": self.target, "on": self.on, "reached": reached is not None,
                   "seconds": None, "training_seconds": None, "epochs": None,
                   "steps": None, "best": best}
        warnings = []
        if reached is not None:
            summary.update(reached)
        else:
            shown = "none measured" if best is None else f"best {best:.4f}"
            warnings.append(f"{self.on} accuracy {self.target} not reached in "
                            f"{len(samples)} epochs ({shown})")
        return MetricResult(self.name, summary, "seconds", "s", samples,
                            conditions={"target": self.target, "on": self.on},
                            warnings=warnings)


class LossCurve(TrainingMetric):
    """The training loss of every step (samples) and per epoch, and the test loss per
    epoch. Summary: ``final_train_loss`` (mean over the last epoch), ``final_test_loss``,
    ``initial_loss`` (first step), ``min_train_loss`` (lowest epoch mean), ``steps``,
    ``train_loss_per_epoch``, ``test_loss_per_epoch``."""
    fields = ("final_train_loss", "final_test_loss", "initial_loss", "min_train_loss",
              "steps", "train_loss_per_epoch", "test_loss_per_epoch")  # the summary's keys

    def measure_training(self, statistics):
        train, test = statistics.train_losses, statistics.test_losses
        steps = statistics.step_losses
        measured = [v for v in train if v is not None]
        summary = {"final_train_loss": train[-1] if train else None,
                   "final_test_loss": test[-1] if test else None,
                   "initial_loss": steps[0] if steps else None,
                   "min_train_loss": min(measured) if measured else None,
                   "steps": len(steps), "train_loss_per_epoch": train,
                   "test_loss_per_epoch": test}
        warnings = [] if steps else ["no training step was recorded"]
        return MetricResult(self.name, summary, "final_train_loss", None, steps,
                            warnings=warnings)


TRAINING_METRICS = {cls.__name__: cls for cls in (TrainingAccuracy, TestAccuracy,
                                                  TimeToAccuracy, LossCurve)}
"""Training metrics by name (for recipes)."""
