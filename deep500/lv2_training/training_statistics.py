"""What a training run measured, per epoch: the training loss and accuracy (from the
outputs of the training steps themselves, on the fly), the test loss and accuracy of a
full validation pass, and where the wall time went (data loading, optimizer steps,
validation). Per-step losses and step times are kept as raw samples.

Statistics serialise to JSON (``to_json``/``from_json``, ``save``/``load``) and back
without loss, so a run's results can be written as measured, checkpointed and reported.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields

from deep500.utils.errors import Deep500Error
from deep500.utils.metric import to_jsonable
from deep500.utils.storage_errors import storage_errors_named


@dataclass
class EpochStatistics:
    """One epoch of training. Times are seconds of ``time.perf_counter``.

    Attributes:
        epoch: 0-based index.
        steps, samples: training steps taken and samples they consumed.
        train_loss: mean training loss over the epoch's samples (each step's loss is
            the mean over its minibatch, weighted by the minibatch size).
        train_accuracy: fraction of the training samples whose ``argmax`` of the network
            output matched the label, counted from each step's outputs (the parameters
            change during the epoch); ``None`` if not measurable.
        test_loss, test_accuracy, test_samples: the validation pass after the epoch's
            training (``None``/0 without a validation set).
        wall_time: from the start of the epoch to the end of its validation pass,
            including the events called in between (not the ``after_epoch`` events).
        data_time: time spent in ``next(sampler)`` (reading and transforming batches).
        step_time: time spent in ``optimizer.step`` (forward, backward, update).
        validation_time: time of the validation pass (inference and its data loading).
        learning_rate: the optimizer's ``learning_rate`` after the epoch's last step.
        completed: False for an epoch ended early by :class:`StopTraining`.
        step_losses, step_times: per training step, the loss and the step's time.
        step_correct, step_counted: per training step, the predictions that matched
            their label and the predictions counted (0 and 0 for a step without labels
            or output), from which ``TrainingAccuracy(every=k)`` samples the accuracy
            every k steps; empty in statistics written before they were recorded.
        optimizer_measurements: what the optimizer measured over the epoch, as returned
            by ``Optimizer.end_epoch`` (distributed optimizers: per-phase times, bytes
            communicated, staleness, replica divergence); empty for most optimizers.
    """
    epoch: int
    steps: int = 0
    samples: int = 0
    train_loss: float | None = None
    train_accuracy: float | None = None
    test_loss: float | None = None
    test_accuracy: float | None = None
    test_samples: int = 0
    wall_time: float = 0.0
    data_time: float = 0.0
    step_time: float = 0.0
    validation_time: float = 0.0
    learning_rate: float | None = None
    completed: bool = True
    step_losses: list = field(default_factory=list)
    step_times: list = field(default_factory=list)
    step_correct: list = field(default_factory=list)
    step_counted: list = field(default_factory=list)
    optimizer_measurements: dict = field(default_factory=dict)

    @property
    def other_time(self) -> float:
        """Wall time outside data loading, steps and validation: events, bookkeeping."""
        return self.wall_time - self.data_time - self.step_time - self.validation_time

    def to_dict(self) -> dict:
        return to_jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> "EpochStatistics":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown or "epoch" not in data:
            raise Deep500Error(f"Not the statistics of an epoch: unknown fields {unknown}"
                               if unknown else "Epoch statistics without an 'epoch' field")
        return cls(**{k: (list(v) if isinstance(v, list) else
                          dict(v) if isinstance(v, dict) else v) for k, v in data.items()})



def _epoch_curve(field_name: str) -> property:
    """A read-only list of every epoch's ``field_name``, in order."""
    return property(lambda self: [getattr(e, field_name) for e in self.epochs],
                    doc=f"Every epoch's {field_name.replace('_', ' ')}, in order.")

@dataclass
class TrainingStatistics:
    """The statistics of a training run: one :class:`EpochStatistics` per epoch, the
    conditions the run was measured in, and why it stopped early (``None`` if it ran
    all its epochs)."""
    epochs: list = field(default_factory=list)
    conditions: dict = field(default_factory=dict)
    stopped_reason: str | None = None

    def __len__(self) -> int:
        return len(self.epochs)

    def __getitem__(self, index) -> EpochStatistics:
        return self.epochs[index]

    def __iter__(self):
        return iter(self.epochs)

    @property
    def final(self) -> EpochStatistics | None:
        """The last epoch, or ``None`` before the first."""
        return self.epochs[-1] if self.epochs else None

    # -- curves ------------------------------------------------------------------------
    train_losses = _epoch_curve("train_loss")
    train_accuracies = _epoch_curve("train_accuracy")
    test_losses = _epoch_curve("test_loss")
    test_accuracies = _epoch_curve("test_accuracy")

    @property
    def step_losses(self) -> list:
        """Every training step's loss, in order, over all epochs."""
        return [loss for e in self.epochs for loss in e.step_losses]

    @property
    def elapsed(self) -> list:
        """Cumulative wall time at the end of each epoch."""
        total, out = 0.0, []
        for e in self.epochs:
            total += e.wall_time
            out.append(total)
        return out

    @property
    def total_time(self) -> float:
        return sum(e.wall_time for e in self.epochs)

    @property
    def steps(self) -> int:
        return sum(e.steps for e in self.epochs)

    def best_test_accuracy(self) -> float | None:
        values = [a for a in self.test_accuracies if a is not None]
        return max(values) if values else None

    # -- serialisation -----------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"epochs": [e.to_dict() for e in self.epochs],
                "conditions": to_jsonable(self.conditions),
                "stopped_reason": self.stopped_reason}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainingStatistics":
        if not isinstance(data, dict) or not isinstance(data.get("epochs"), list):
            raise Deep500Error("Not training statistics: expected a mapping with a list "
                               "'epochs' (as written by TrainingStatistics.to_dict)")
        return cls([EpochStatistics.from_dict(e) for e in data["epochs"]],
                   dict(data.get("conditions") or {}), data.get("stopped_reason"))

    @classmethod
    def from_json(cls, text: str) -> "TrainingStatistics":
        return cls.from_dict(json.loads(text))

    def save(self, path: str) -> str:
        """Write the statistics as JSON (atomically: a reader never sees half a file; a
        write that fails leaves no temporary file, and a full, read-only or
        size-limited disk is a StorageError naming ``path``)."""
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        temporary = f"{path}.tmp{os.getpid()}"
        with storage_errors_named(path):
            os.makedirs(folder, exist_ok=True)
            try:
                with open(temporary, "w", encoding="utf-8") as handle:
                    handle.write(self.to_json(indent=1))
                os.replace(temporary, path)
            finally:
                if os.path.exists(temporary):
                    os.remove(temporary)
        return path

    @classmethod
    def load(cls, path: str) -> "TrainingStatistics":
        try:
            with open(path, encoding="utf-8") as handle:
                return cls.from_json(handle.read())
        except FileNotFoundError:
            raise Deep500Error(f"Training statistics file {path!r} does not exist") from None
        except (json.JSONDecodeError, TypeError) as exc:
            raise Deep500Error(f"{path}: not training statistics JSON ({exc})") from None

    def __str__(self) -> str:
        final = self.final
        if final is None:
            return "TrainingStatistics(no epochs)"
        shown = [f"{len(self)} epochs in {self.total_time:.3g} s",
                 f"train loss {_fmt(final.train_loss)}",
                 f"train accuracy {_fmt(final.train_accuracy)}",
                 f"test accuracy {_fmt(final.test_accuracy)}"]
        if self.stopped_reason:
            shown.append(f"stopped: {self.stopped_reason}")
        return "TrainingStatistics(" + ", ".join(shown) + ")"


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"
