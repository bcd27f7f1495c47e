"""Where: output = X where condition is true, else Y, with multidirectional broadcasting
of all three inputs. https://onnx.ai/onnx/operators/onnx__Where.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_elementwise import (broadcast_shape,
                                                                            check_same_dtype)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Where")
class Where(ReferenceOp):
    def forward(self, condition, X, Y):
        condition = np.asarray(condition)
        if condition.dtype != np.bool_:
            raise ShapeError(f"{self.op_type}: condition must be bool, got {condition.dtype}")
        check_same_dtype(self.op_type, X, Y)
        broadcast_shape(self.op_type, condition, X, Y)
        return np.asarray(np.where(condition, X, Y))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        condition, X, Y = (np.asarray(x) for x in fwd_inputs)
        if not np.issubdtype(X.dtype, np.floating):
            return [None, None, None]
        dZ = np.zeros(fwd_outputs[0].shape, X.dtype) if grads[0] is None else grads[0]
        zero = X.dtype.type(0)
        dX = unbroadcast(np.where(condition, dZ, zero), X.shape).astype(X.dtype, copy=False)
        dY = unbroadcast(np.where(condition, zero, dZ), Y.shape).astype(Y.dtype, copy=False)
        return [None, dX, dY]
