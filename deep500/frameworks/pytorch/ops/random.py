"""The random family in PyTorch: Dropout, its mask drawn by torch's generator.
https://onnx.ai/onnx/operators/onnx__Dropout.html
"""
from __future__ import annotations

from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _dropout(x, ratio: float, training: bool, outputs: int):
    if training and ratio > 0:
        mask = torch.rand_like(x, dtype=torch.float32) >= ratio
        y = x * mask / (1.0 - ratio)
    else:
        y, mask = x, None
    if outputs == 1:
        return y
    return y, torch.ones_like(x, dtype=torch.bool) if mask is None else mask


class RandomOps:
    """``visit_<op>`` of the random family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_dropout(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Dropout.html: in training mode each
        element is kept with probability 1 - ratio (mask drawn by torch's generator) and
        scaled by 1/(1 - ratio); otherwise Y = X and the mask is all true. ratio and
        training_mode known while building are read once, others at every run."""
        outputs = len(op.outputs)
        x_name, ratio_name, mode_name = (list(op.inputs) + ["", ""])[:3]
        if any(name and name not in self.known for name in (ratio_name, mode_name)):
            def dropout_fed(x, ratio=None, mode=None):
                ratio = 0.5 if ratio is None else float(ratio.reshape(-1)[0])
                return _dropout(x, ratio, bool(mode), outputs)
            self._emit(op, dropout_fed, [x_name, ratio_name, mode_name])
            return
        training = bool(self._scalar(mode_name)) if mode_name else False
        ratio = self._scalar(ratio_name) if ratio_name else 0.5
        self._emit(op, lambda x: _dropout(x, ratio, training, outputs), [x_name])


__all__ = ["RandomOps"]
