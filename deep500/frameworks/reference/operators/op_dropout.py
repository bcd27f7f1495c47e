"""Dropout (opset 13+): in training mode, output = data·mask / (1 - ratio) with each mask
element kept with probability 1 - ratio; otherwise output = data and mask is all True.
https://onnx.ai/onnx/operators/onnx__Dropout.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error


@register("Dropout")
class Dropout(ReferenceOp):
    """The mask keeps the elements where a uniform draw in [0, 1) is at least ``ratio``.
    With the ``seed`` attribute, every forward call draws from NumPy's Mersenne Twister
    (``RandomState``) seeded afresh with ``seed``, as ONNX's reference implementation and
    test data do: the operator is then a deterministic function of its inputs
    (reproducible, checkable by finite differences, and equal to ONNX's masks); without
    it, masks come from one unseeded generator per operator instance."""
    defaults = {"seed": None}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        self._rng = np.random.RandomState() if self.attr("seed") is None else None

    def _settings(self, ratio, training_mode):
        ratio = 0.5 if ratio is None else float(np.asarray(ratio))
        training = False if training_mode is None else bool(np.asarray(training_mode))
        if not 0.0 <= ratio <= 1.0:
            raise Deep500Error(f"{self.op_type}: ratio must be in [0, 1], got {ratio}")
        return ratio, training

    def forward(self, data, ratio=None, training_mode=None):
        ratio, training = self._settings(ratio, training_mode)
        if not training or ratio == 0.0:
            return data.copy(), np.ones(data.shape, dtype=bool)
        rng = self._rng
        if rng is None:
            rng = np.random.RandomState(int(self.attr("seed")) % 2**32)
        mask = rng.uniform(0.0, 1.0, data.shape) >= ratio
        if ratio == 1.0:
            return np.zeros_like(data), mask
        return data * mask * data.dtype.type(1.0 / (1.0 - ratio)), mask

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data = fwd_inputs[0]
        ratio, training = self._settings(*(list(fwd_inputs[1:]) + [None, None])[:2])
        rest = [None] * (len(fwd_inputs) - 1)
        if grads[0] is None:
            return [np.zeros_like(data)] + rest
        if not training or ratio == 0.0:
            return [grads[0].copy()] + rest
        if ratio == 1.0:
            return [np.zeros_like(data)] + rest
        mask = fwd_outputs[1]
        return [grads[0] * mask * data.dtype.type(1.0 / (1.0 - ratio))] + rest
