"""Unsqueeze (opset 13): insert size-1 dimensions at the int64 ``axes`` input, which index
the output (negative ones count from the end of the output).
https://onnx.ai/onnx/operators/onnx__Unsqueeze.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reshape import ShapeChange
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.axes import distinct_axes


@register("Unsqueeze")
class Unsqueeze(ShapeChange):
    def output_shape(self, shape: tuple, axes=None) -> tuple:
        if axes is None:
            raise ShapeError(f"{self.op_type} needs the axes input")
        rank = len(shape) + np.size(axes)
        inserted = set(distinct_axes(self.op_type, axes, rank,
                                     f"an output of rank {rank} from shape {tuple(shape)}"))
        kept = iter(shape)
        return tuple(1 if i in inserted else next(kept) for i in range(rank))
