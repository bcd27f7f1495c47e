"""Shared code of the variadic Min and Max: elementwise extremum of any number of inputs
with multidirectional broadcasting. https://onnx.ai/onnx/operators/onnx__Max.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_elementwise import (broadcast_shape,
                                                                            check_same_dtype)
from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError


class Extremum(ReferenceOp):
    """Y = combine(x0, x1, ...). Subclasses set ``combine`` (np.minimum or np.maximum).

    Each output element's gradient goes to the first input that attains it.
    """
    combine = None

    def forward(self, *inputs):
        if not inputs:
            raise ShapeError(f"{self.op_type}: needs at least one input")
        check_same_dtype(self.op_type, *inputs)
        shape = broadcast_shape(self.op_type, *inputs)
        result = np.broadcast_to(inputs[0], shape).copy()
        for x in inputs[1:]:
            type(self).combine(result, x, out=result)
        return result

    def backward(self, grads, fwd_inputs, fwd_outputs):
        Y = fwd_outputs[0]
        dY = np.zeros_like(Y) if grads[0] is None else grads[0]
        zero = Y.dtype.type(0)
        taken = np.zeros(Y.shape, dtype=bool)
        result = []
        for x in fwd_inputs:
            wins = (x == Y) & ~taken
            taken |= wins
            result.append(unbroadcast(np.where(wins, dY, zero), np.shape(x)).astype(
                np.asarray(x).dtype, copy=False))
        return result
