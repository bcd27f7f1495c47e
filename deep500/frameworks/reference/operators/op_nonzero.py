"""NonZero: the int64 indices of the non-zero elements, one row per dimension (shape
[rank, count]), in row-major order. https://onnx.ai/onnx/operators/onnx__NonZero.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("NonZero")
class NonZero(ReferenceOp):
    def forward(self, X):
        X = np.asarray(X)
        if X.ndim == 0:   # no dimensions to index: 0 rows, one column if X != 0
            return np.zeros((0, int(X != 0)), np.int64)
        return np.array(np.nonzero(X), dtype=np.int64).reshape(X.ndim, -1)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]
