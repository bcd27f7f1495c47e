"""The random family in PyTorch: Dropout (https://onnx.ai/onnx/operators/onnx__Dropout.html),
its mask drawn by torch's generator.
"""
from __future__ import annotations

from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


class RandomOps:
    """``visit_<op>`` of the random family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_dropout(self, op, network):
        outputs = len(op.outputs)
        names = list(op.inputs) + ["", ""]
        ratio_name, mode_name = names[1], names[2]
        if mode_name and mode_name not in self.known:
            raise self.node_error(op, "training_mode must be a constant (an initializer "
                                  "or a Constant node)")
        training = bool(self._scalar(mode_name)) if mode_name else False
        ratio = self._scalar(ratio_name) if ratio_name else 0.5
        if training and ratio is None:
            raise self.node_error(op, "in training mode, ratio must be a constant")

        def dropout(x, *_):
            if training and ratio > 0:
                mask = torch.rand_like(x, dtype=torch.float32) >= ratio
                y = x * mask / (1.0 - ratio)
            else:
                y, mask = x, None
            if outputs == 1:
                return y
            return y, torch.ones_like(x, dtype=torch.bool) if mask is None else mask
        self._emit(op, dropout, op.inputs[:1])


__all__ = ["RandomOps"]
