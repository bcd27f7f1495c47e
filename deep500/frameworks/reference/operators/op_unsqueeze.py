"""Unsqueeze (opset 13): insert size-1 dimensions at the int64 ``axes`` input, which index
the output (negative ones count from the end of the output).
https://onnx.ai/onnx/operators/onnx__Unsqueeze.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reshape import ShapeChange
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError


@register("Unsqueeze")
class Unsqueeze(ShapeChange):
    def output_shape(self, shape: tuple, axes=None) -> tuple:
        if axes is None:
            raise ShapeError(f"{self.op_type} needs the axes input")
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
        rank = len(shape) + len(axes)
        if any(not -rank <= a < rank for a in axes):
            raise ShapeError(f"{self.op_type}: axes {axes} must lie in [{-rank}, {rank - 1}] "
                             f"for an input of shape {tuple(shape)}")
        inserted = {a % rank for a in axes}
        if len(inserted) != len(axes):
            raise ShapeError(f"{self.op_type}: axes {axes} name an axis twice")
        kept = iter(shape)
        return tuple(1 if i in inserted else next(kept) for i in range(rank))
