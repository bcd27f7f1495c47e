"""Progress of the epochs inside one training configuration, on the console.

The runner's bar counts configurations; a training configuration can take half a minute
with nothing moving (issue 31, item 7). While ``deep500 run`` shows progress (rank 0,
not ``--quiet``), the training experiments add :class:`EpochProgress` to their events:
a second tqdm bar of epochs under the configurations' bar on a terminal, or, when
stderr is not a terminal (a CI log, a pipe), one line per epoch.

The event runs in ``after_epoch``, which a training epoch's measured ``wall_time`` does
not include (:class:`deep500.lv2_training.training_statistics.EpochStatistics`).
"""
from __future__ import annotations

import contextlib
import contextvars
import sys

from deep500.lv2_training.events import TrainingEvent

_SHOWN = contextvars.ContextVar("deep500_epoch_progress_shown", default=False)


@contextlib.contextmanager
def shown(enabled: bool):
    """Inside, :func:`epoch_events` gives the epoch progress event when ``enabled``."""
    token = _SHOWN.set(bool(enabled))
    try:
        yield
    finally:
        _SHOWN.reset(token)


def epoch_events() -> list:
    """``[EpochProgress()]`` while progress is shown (see :func:`shown`), else ``[]``."""
    return [EpochProgress()] if _SHOWN.get() else []


def epoch_line(epoch: int, epochs: int, stats) -> str:
    """One epoch's console line: its number, training loss, test accuracy and time."""
    parts = [f"epoch {epoch + 1}/{epochs}"]
    if stats.train_loss is not None:
        parts.append(f"loss {stats.train_loss:.4f}")
    if stats.test_accuracy is not None:
        parts.append(f"test accuracy {stats.test_accuracy:.4f}")
    parts.append(f"{stats.wall_time:.2f} s")
    return "  " + ", ".join(parts)


class EpochProgress(TrainingEvent):
    """A bar of the epochs of one training run on a terminal (``file``'s ``isatty``),
    else a line per epoch (:func:`epoch_line`). Draws on ``file`` (default stderr)."""

    def __init__(self, file=None, terminal: bool | None = None):
        self.file = file if file is not None else sys.stderr
        self.terminal = (terminal if terminal is not None
                         else bool(getattr(self.file, "isatty", lambda: False)()))
        self._bar = None

    def before_training(self, trainer, stats) -> None:
        if self.terminal:
            from tqdm import tqdm
            self._bar = tqdm(total=trainer.epochs, desc="  epochs", unit="epoch",
                             leave=False, position=1, file=self.file, dynamic_ncols=True)

    def after_epoch(self, trainer, epoch: int, stats) -> None:
        if self._bar is None:
            from tqdm import tqdm
            tqdm.write(epoch_line(epoch, trainer.epochs, stats), file=self.file)
            return
        shown = {"loss": f"{stats.train_loss:.4f}" if stats.train_loss is not None
                 else "n/a"}
        if stats.test_accuracy is not None:
            shown["test_acc"] = f"{stats.test_accuracy:.4f}"
        self._bar.set_postfix(shown, refresh=False)
        self._bar.update(1)

    def after_training(self, trainer, stats) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
