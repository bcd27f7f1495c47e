"""PRelu: Y = slope·X for X < 0, X otherwise, with ``slope`` broadcast to X's shape
(unidirectional broadcasting); float and integer tensors.
https://onnx.ai/onnx/operators/onnx__PRelu.html (He et al., Delving Deep into Rectifiers,
2015)"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import compute_dtype
from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_elementwise import (
    broadcast_shape, check_kind, check_same_dtype, is_floating)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("PRelu")
class PRelu(ReferenceOp):
    def forward(self, X, slope):
        X, slope = np.asarray(X), np.asarray(slope)
        check_kind(self.op_type, "fiu", X, slope)
        check_same_dtype(self.op_type, X, slope)
        if broadcast_shape(self.op_type, X, slope) != X.shape:
            raise ShapeError(f"PRelu: slope of shape {slope.shape} does not broadcast to X's "
                             f"shape {X.shape} (unidirectional broadcasting: slope's "
                             f"trailing dimensions must equal X's or be 1)")
        work = compute_dtype(X.dtype)
        X_, slope_ = X.astype(work, copy=False), slope.astype(work, copy=False)
        return np.asarray(np.where(X_ < 0, slope_ * X_, X_)).astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, slope = (np.asarray(x) for x in fwd_inputs)
        if not is_floating(X.dtype):
            return [None, None]
        if grads[0] is None:
            return [np.zeros_like(X), np.zeros_like(slope)]
        work = compute_dtype(X.dtype)
        dY = np.asarray(grads[0]).astype(work, copy=False)
        X_, slope_ = X.astype(work, copy=False), slope.astype(work, copy=False)
        negative = X_ < 0
        zero = work.type(0)
        dX = np.where(negative, dY * slope_, dY)
        dslope = unbroadcast(np.where(negative, dY * X_, zero), slope.shape)
        return [np.asarray(dX).astype(X.dtype), np.asarray(dslope).astype(slope.dtype)]
