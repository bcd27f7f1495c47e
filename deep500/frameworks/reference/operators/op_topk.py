"""TopK: the K largest (or, with largest=0, smallest) elements along ``axis`` and their
int64 indices, in sorted order; equal values keep the lower index first.
https://onnx.ai/onnx/operators/onnx__TopK.html

With sorted=0 the spec leaves the order open; the sorted order is returned then too.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import normalize_axis
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("TopK")
class TopK(ReferenceOp):
    defaults = {"axis": -1, "largest": 1, "sorted": 1}

    def _indices(self, X, K):
        axis = normalize_axis(self.op_type, self.attr("axis"), X.ndim)
        K = np.asarray(K).reshape(-1)
        if K.size != 1 or not np.issubdtype(K.dtype, np.integer):
            raise ShapeError(f"{self.op_type}: K must be one int64 value, got {K}")
        k, extent = int(K[0]), X.shape[axis]
        if not 0 <= k <= extent:
            raise ShapeError(f"{self.op_type}: K = {k} must lie in [0, {extent}] (axis {axis} "
                             f"of an input of shape {X.shape})")
        if self.attr("largest"):
            # A stable ascending sort of the reversed axis, read backwards, is descending
            # with ties in increasing original index.
            order = np.argsort(np.flip(X, axis), axis=axis, kind="stable")
            order = extent - 1 - np.flip(order, axis)
        else:
            order = np.argsort(X, axis=axis, kind="stable")
        return axis, np.take(order, np.arange(k), axis=axis).astype(np.int64)

    def forward(self, X, K):
        X = np.asarray(X)
        axis, indices = self._indices(X, K)
        return np.take_along_axis(X, indices, axis=axis), indices

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X = np.asarray(fwd_inputs[0])
        if not np.issubdtype(X.dtype, np.floating):
            return [None, None]
        dX = np.zeros_like(X)
        if grads[0] is not None:
            axis = normalize_axis(self.op_type, self.attr("axis"), X.ndim)
            np.put_along_axis(dX, fwd_outputs[1], grads[0], axis=axis)
        return [dX, None]
