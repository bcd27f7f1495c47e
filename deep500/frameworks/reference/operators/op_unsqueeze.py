"""Unsqueeze (opset 13): insert size-1 dimensions at the int64 ``axes`` input, which index
the output (negative ones count from the end of the output).
https://onnx.ai/onnx/operators/onnx__Unsqueeze.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Unsqueeze")
class Unsqueeze(ReferenceOp):
    def output_shape(self, shape: tuple, axes) -> tuple:
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

    def forward(self, data, axes=None):
        data = np.asarray(data)
        # A copy, so that the output never aliases the input.
        return data.reshape(self.output_shape(data.shape, axes)).copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data = fwd_inputs[0]
        d_data = (np.zeros_like(data) if grads[0] is None
                  else np.asarray(grads[0]).reshape(np.shape(data)))
        return [d_data] + [None] * (len(fwd_inputs) - 1)
