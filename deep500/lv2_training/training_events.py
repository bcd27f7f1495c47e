"""Ready-made training events: a progress bar, stopping at a target accuracy or after a
time limit, writing per-epoch results as they are measured (CSV, JSON lines), and
saving checkpoints.

Each is a :class:`TrainingEvent` passed to ``Trainer.run_loop(epochs, events=[...])``
or ``d5.test_training(..., events=[...])``.
"""
from __future__ import annotations

import contextlib
import csv
import glob
import io
import json
import os
import re
import sys
import time

from deep500.lv2_training.events import StopTraining, TrainingEvent
from deep500.lv2_training.training_metrics import accuracy_target
from deep500.utils.errors import Deep500Error
from deep500.utils.storage_errors import StorageError, storage_errors_named


class ProgressBar(TrainingEvent):
    """A tqdm bar per epoch over its training steps, showing the running training loss
    and accuracy, then the epoch's test accuracy.

    Args:
        disable: ``True`` hides it; ``None`` (default) shows it only on a terminal.
        refresh_seconds: the loss and accuracy shown are updated at most this often, so
            the bar costs nothing measurable per step.
        file: where to draw (default ``sys.stderr``).
    """

    def __init__(self, disable: bool | None = None, refresh_seconds: float = 0.5,
                 file=None):
        self.disable = disable
        self.refresh_seconds = float(refresh_seconds)
        self.file = file
        self._bar = None
        self._shown_at = 0.0
        self._losses = 0.0
        self._steps = 0

    def before_epoch(self, trainer, epoch):
        from tqdm import tqdm
        self.close()
        self._bar = tqdm(total=len(trainer.train_sampler),
                         desc=f"epoch {epoch + 1}/{trainer.epochs}", unit="step",
                         leave=True, disable=self.disable,
                         file=self.file if self.file is not None else sys.stderr)
        self._shown_at, self._losses, self._steps = time.perf_counter(), 0.0, 0

    def after_training_step(self, trainer, step, inputs, outputs):
        bar = self._bar
        if bar is None or bar.disable:
            return
        bar.update(1)
        record = trainer.epoch_stats
        now = time.perf_counter()
        if now - self._shown_at >= self.refresh_seconds and record.step_losses:
            self._shown_at = now
            recent = record.step_losses[-50:]
            bar.set_postfix(loss=f"{sum(recent) / len(recent):.4f}", refresh=False)

    def after_epoch(self, trainer, epoch, stats):
        if self._bar is not None and not self._bar.disable:
            shown = {"loss": _short(stats.train_loss), "acc": _short(stats.train_accuracy)}
            if stats.test_accuracy is not None:
                shown["test_acc"] = _short(stats.test_accuracy)
            self._bar.set_postfix(shown, refresh=True)
        self.close()

    def after_training(self, trainer, stats):
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _short(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


class StopAtAccuracy(TrainingEvent):
    """Stops training after the first epoch whose accuracy reaches ``target``
    (``on="test"``: the validation pass; ``on="train"``: the training steps')."""

    def __init__(self, target: float, on: str = "test"):
        self.target, self.on = accuracy_target("StopAtAccuracy", target, on)

    def before_training(self, trainer, stats):
        if self.on == "test" and trainer.validation_sampler is None:
            raise Deep500Error("StopAtAccuracy(on='test') needs a validation sampler; give "
                               "the Trainer one or use on='train'")

    def after_epoch(self, trainer, epoch, stats):
        accuracy = stats.test_accuracy if self.on == "test" else stats.train_accuracy
        if accuracy is not None and accuracy >= self.target:
            raise StopTraining(f"{self.on} accuracy {accuracy:.4f} reached the target "
                               f"{self.target} after epoch {epoch + 1}")


class TimeLimit(TrainingEvent):
    """Stops training cleanly once ``seconds`` of wall time have passed since training
    started (checked after every step and epoch, so a run overshoots by at most one
    step, or one validation pass)."""

    def __init__(self, seconds: float):
        if not float(seconds) > 0:
            raise Deep500Error(f"TimeLimit: seconds must be positive, got {seconds}")
        self.seconds = float(seconds)
        self._deadline = float("inf")

    def before_training(self, trainer, stats):
        self._deadline = time.perf_counter() + self.seconds

    def after_training_step(self, trainer, step, inputs, outputs):
        if time.perf_counter() >= self._deadline:
            raise StopTraining(f"time limit of {self.seconds:g} s reached at step "
                               f"{step + 1}")

    def after_epoch(self, trainer, epoch, stats):
        if time.perf_counter() >= self._deadline:
            raise StopTraining(f"time limit of {self.seconds:g} s reached after epoch "
                               f"{epoch + 1}")


class _EpochWriter(TrainingEvent):
    """Writes each epoch to ``path`` as soon as it ends, flushed to disk, so results
    measured before a failure stay there. At the start of a run the file is rewritten
    with the epochs already in the statistics (those of a resumed checkpoint), so it
    always matches the run's trajectory; an epoch ended early by StopTraining is
    written when training ends."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        self._written = 0

    def before_training(self, trainer, stats):
        folder = os.path.dirname(os.path.abspath(self.path))
        with storage_errors_named(self.path):
            os.makedirs(folder, exist_ok=True)
            with open(self.path, "w", encoding="utf-8", newline="") as handle:
                handle.write(self._header())
                self._write(handle, stats.epochs)
        self._written = len(stats.epochs)

    def after_epoch(self, trainer, epoch, stats):
        self._append(trainer.stats)

    def after_training(self, trainer, stats):
        self._append(stats)

    def _append(self, stats) -> None:
        epochs = stats.epochs[self._written:]
        if not epochs:
            return
        end = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        try:
            with storage_errors_named(self.path), \
                    open(self.path, "a", encoding="utf-8", newline="") as handle:
                self._write(handle, epochs)
        except StorageError:
            with contextlib.suppress(OSError):  # the epochs written before, whole
                os.truncate(self.path, end)
            raise
        self._written = len(stats.epochs)

    def _write(self, handle, epochs) -> None:
        if not epochs:
            return
        handle.write("".join(self._row(e) for e in epochs))
        handle.flush()
        os.fsync(handle.fileno())

    def _header(self) -> str:
        return ""

    def _row(self, epoch) -> str:
        raise NotImplementedError


CSV_COLUMNS = ("epoch", "steps", "samples", "train_loss", "train_accuracy", "test_loss",
               "test_accuracy", "test_samples", "wall_time", "data_time", "step_time",
               "validation_time", "learning_rate", "completed")


class CSVWriter(_EpochWriter):
    """One CSV row per epoch (columns :data:`CSV_COLUMNS`; empty: not measured)."""

    def _header(self) -> str:
        return ",".join(CSV_COLUMNS) + "\r\n"

    def _row(self, epoch) -> str:
        values = []
        for column in CSV_COLUMNS:
            value = getattr(epoch, column)
            values.append("" if value is None else
                          repr(value) if isinstance(value, float) else value)
        buffer = io.StringIO()
        csv.writer(buffer).writerow(values)
        return buffer.getvalue()


class JSONWriter(_EpochWriter):
    """One JSON object per line and epoch (``EpochStatistics.to_dict()``, with the
    per-step losses and times): JSON lines, readable with ``read_json_lines``."""

    def _row(self, epoch) -> str:
        return json.dumps(epoch.to_dict()) + "\n"


def read_json_lines(path: str) -> list[dict]:
    """The epochs a :class:`JSONWriter` wrote (a damaged last line, from a crash while
    writing, is skipped)."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    break
    return records


class Checkpoint(TrainingEvent):
    """Saves a checkpoint (``Trainer.save_checkpoint``) into ``folder`` after every
    ``every_epochs`` epochs, as ``epoch-NNNN.npz`` (the number of epochs done).
    ``keep`` keeps only the newest so many (``None``: all). Resume with
    ``trainer.run_loop(epochs, resume_from=Checkpoint.latest(folder))``."""

    PATTERN = "epoch-{:04d}.npz"

    def __init__(self, folder: str, every_epochs: int = 1, keep: int | None = None):
        if int(every_epochs) < 1:
            raise Deep500Error(f"Checkpoint: every_epochs must be >= 1, got {every_epochs}")
        if keep is not None and int(keep) < 1:
            raise Deep500Error(f"Checkpoint: keep must be >= 1 or None, got {keep}")
        self.folder = os.fspath(folder)
        self.every_epochs = int(every_epochs)
        self.keep = None if keep is None else int(keep)
        self.saved: list[str] = []

    def after_epoch(self, trainer, epoch, stats):
        if trainer.epoch % self.every_epochs == 0:
            path = os.path.join(self.folder, self.PATTERN.format(trainer.epoch))
            self.saved.append(trainer.save_checkpoint(path))
            if self.keep is not None:
                for old in self.list(self.folder)[:-self.keep]:
                    os.remove(old)

    @classmethod
    def list(cls, folder: str) -> list[str]:
        """The checkpoints in ``folder``, oldest first."""
        found = []
        for path in glob.glob(os.path.join(glob.escape(os.fspath(folder)), "epoch-*.npz")):
            match = re.fullmatch(r"epoch-(\d+)\.npz", os.path.basename(path))
            if match:
                found.append((int(match.group(1)), path))
        return [path for _, path in sorted(found)]

    @classmethod
    def latest(cls, folder: str) -> str | None:
        """The newest checkpoint in ``folder``, or ``None`` if there is none (a first
        run: ``resume_from=None`` starts afresh)."""
        found = cls.list(folder)
        return found[-1] if found else None
