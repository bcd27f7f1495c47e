"""Where: output = X where condition is true, else Y, with multidirectional broadcasting
of all three inputs. https://onnx.ai/onnx/operators/onnx__Where.html"""
import math

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
        shape = broadcast_shape(self.op_type, condition, X, Y)
        X, Y = np.asarray(X), np.asarray(Y)
        if condition.size != 1 and 4 * condition.size <= math.prod(shape) and \
                4 * np.count_nonzero(condition) <= condition.size:
            return _where_sparse(condition, X, Y, shape)
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


def _where_sparse(condition, X, Y, shape) -> np.ndarray:
    """np.where(condition, X, Y) for a condition of other than one element that broadcasts
    (at least 4x smaller than the output) and is mostly false (an attention mask over padding): Y copied out, then X
    written at the true positions only, each a slice along the broadcast axes.
    np.where's inner loop runs along the last axis, one call per row of the short rows a
    broadcast condition leaves (~100 µs for 32 x 4 x 32 x 32 float32 against ~30)."""
    out = np.empty(shape, X.dtype)
    np.copyto(out, Y)
    condition = condition.reshape((1,) * (len(shape) - condition.ndim) + condition.shape)
    index = tuple(slice(None) if size == 1 else positions
                  for size, positions in zip(condition.shape, np.nonzero(condition)))
    out[index] = X if X.ndim == 0 else np.broadcast_to(X, shape)[index]
    return out
