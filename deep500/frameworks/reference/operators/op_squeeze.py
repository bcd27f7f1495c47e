"""Squeeze (opset 13): remove the size-1 dimensions named by the optional int64 ``axes``
input (negative ones count from the end), or all size-1 dimensions without it.
https://onnx.ai/onnx/operators/onnx__Squeeze.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reshape import ShapeChange
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError


@register("Squeeze")
class Squeeze(ShapeChange):
    def output_shape(self, shape: tuple, axes=None) -> tuple:
        rank = len(shape)
        if axes is None:
            return tuple(d for d in shape if d != 1)
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
        if any(not -rank <= a < rank for a in axes):
            raise ShapeError(f"{self.op_type}: axes {axes} must lie in [{-rank}, {rank - 1}] "
                             f"for an input of shape {tuple(shape)}")
        removed = {a % rank for a in axes}
        if len(removed) != len(axes):
            raise ShapeError(f"{self.op_type}: axes {axes} name an axis twice")
        wrong = [a for a in sorted(removed) if shape[a] != 1]
        if wrong:
            raise ShapeError(f"{self.op_type}: axes {wrong} of the input of shape "
                             f"{tuple(shape)} do not have size 1 and cannot be removed")
        return tuple(d for i, d in enumerate(shape) if i not in removed)
