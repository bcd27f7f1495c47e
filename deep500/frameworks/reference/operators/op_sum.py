"""Sum: elementwise sum of any number of inputs with multidirectional broadcasting.
https://onnx.ai/onnx/operators/onnx__Sum.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_elementwise import (broadcast_shape,
                                                                            check_same_dtype)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Sum")
class Sum(ReferenceOp):
    def forward(self, *inputs):
        if not inputs:
            raise ShapeError("Sum: needs at least one input")
        check_same_dtype(self.op_type, *inputs)
        shape = broadcast_shape(self.op_type, *inputs)
        result = np.zeros(shape, dtype=inputs[0].dtype)
        for x in inputs:
            result += x
        return result

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if grads[0] is None:
            return [np.zeros_like(x) for x in fwd_inputs]
        return [unbroadcast(grads[0], x.shape).astype(x.dtype, copy=True) for x in fwd_inputs]
