"""GlobalAveragePool: Y[n, c, 1, ..., 1] = the mean of X[n, c] over all spatial axes.
https://onnx.ai/onnx/operators/onnx__GlobalAveragePool.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


def _spatial_axes(X) -> tuple:
    if X.ndim < 2:
        raise ShapeError(f"GlobalAveragePool: input X must be (N, C, *spatial), got shape "
                         f"{X.shape}")
    return tuple(range(2, X.ndim))


@register("GlobalAveragePool")
class GlobalAveragePool(ReferenceOp):
    def forward(self, X):
        return X.mean(axis=_spatial_axes(X), keepdims=True)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        count = int(np.prod(X.shape[2:], dtype=np.int64))
        share = grads[0] / X.dtype.type(count)
        return [np.broadcast_to(share, X.shape).copy()]
