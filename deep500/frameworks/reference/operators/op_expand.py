"""Expand: broadcast the input against the int64 ``shape`` input (multidirectionally, so a
1 in ``shape`` keeps the input's dimension).
https://onnx.ai/onnx/operators/onnx__Expand.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Expand")
class Expand(ReferenceOp):
    def forward(self, input, shape):
        input = np.asarray(input)
        requested = tuple(int(d) for d in np.asarray(shape).reshape(-1))
        try:
            output_shape = np.broadcast_shapes(input.shape, requested)
        except ValueError:
            raise ShapeError(f"{self.op_type}: an input of shape {input.shape} does not "
                             f"broadcast with shape {list(requested)}") from None
        return np.broadcast_to(input, output_shape).copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = np.asarray(fwd_inputs[0])
        if grads[0] is None:
            return [np.zeros_like(input), None]
        d_input = unbroadcast(np.asarray(grads[0]), input.shape)
        # Never hand back the upstream array itself: an executor may accumulate in place.
        return [d_input.copy() if d_input is grads[0] else d_input, None]
