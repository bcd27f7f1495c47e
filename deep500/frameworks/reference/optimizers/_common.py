"""What the reference optimizers share: hyper-parameter checks and a scratch buffer.

The update rules run in place (NumPy ``out=``) so that a step allocates nothing: state
arrays come from ``slot``, one temporary from ``scratch``. ``update_rule`` writes the
new value into ``old_param`` and returns it; the executor's network fetched that array
for this step (the reference network hands out its own parameter, the PyTorch and
TensorFlow networks a copy), so nothing else reads it.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv2_training.optimizer import OptimizerEvent, UpdateRuleOptimizer
from deep500.utils.errors import Deep500Error


def check_hyperparameter(optimizer: str, name: str, value, low: float = 0.0,
                         high: float = math.inf, low_open: bool = False,
                         high_open: bool = False) -> float:
    """``value`` as a float, or a Deep500Error if it is not a number in the range."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise Deep500Error(f"{optimizer}: {name} must be a number, got {value!r}") from None
    below = number <= low if low_open else number < low
    above = number >= high if high_open else number > high
    if math.isnan(number) or below or above:
        interval = (f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}")
        raise Deep500Error(f"{optimizer}: {name} must lie in {interval}, got {value!r}")
    return number


class Scratch:
    """One growing flat buffer per dtype, handed out as a view of any shape: a
    temporary for update rules that costs the largest parameter's size once, not a
    fresh allocation per parameter and step. A view is valid until the next ``like``."""

    def __init__(self):
        self._buffers: dict[np.dtype, np.ndarray] = {}

    def like(self, array: np.ndarray) -> np.ndarray:
        dtype = array.dtype
        buffer = self._buffers.get(dtype)
        if buffer is None or buffer.size < array.size:
            buffer = self._buffers[dtype] = np.empty(array.size, dtype)
        return buffer[:array.size].reshape(array.shape)


def writable(array) -> np.ndarray:
    """``array`` itself if it can be written in place, else a writable copy."""
    array = np.asarray(array)
    if array.flags.writeable and array.flags.c_contiguous:
        return array
    return np.array(array, order="C")


def moving_average(average: np.ndarray, value: np.ndarray, decay: float,
                   scratch: np.ndarray) -> None:
    """average ← decay·average + (1 − decay)·value, in place (``value`` may be
    ``scratch``, which it overwrites)."""
    np.multiply(value, 1.0 - decay, out=scratch)
    average *= decay
    average += scratch


def adaptive_step(param: np.ndarray, direction: np.ndarray, accumulator: np.ndarray,
                  epsilon: float, step_size: float, scratch: np.ndarray) -> np.ndarray:
    """param ← param − step_size·direction / (√accumulator + ε), in place: the step of
    AdaGrad, RMSProp and Adam, which differ in how they accumulate."""
    np.sqrt(accumulator, out=scratch)
    scratch += epsilon
    np.divide(direction, scratch, out=scratch)
    scratch *= step_size
    return np.subtract(param, scratch, out=param)


class ReferenceUpdateRule(UpdateRuleOptimizer):
    """Base of the reference update-rule optimizers: checks the learning rate and owns
    the scratch buffer."""

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 learning_rate: float = 0.1, events: Sequence[OptimizerEvent] = ()):
        super().__init__(executor, loss, events)
        self.learning_rate = check_hyperparameter(self.name, "learning_rate",
                                                  learning_rate)
        self.scratch = Scratch()

    def _param(self, old_param) -> np.ndarray:
        return writable(old_param)
