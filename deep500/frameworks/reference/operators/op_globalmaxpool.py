"""GlobalMaxPool: Y[n, c] = the maximum of X[n, c] over all spatial positions (kept as
size-1 axes). https://onnx.ai/onnx/operators/onnx__GlobalMaxPool.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("GlobalMaxPool")
class GlobalMaxPool(ReferenceOp):
    def _planes(self, X):
        """X as (N, C, spatial positions)."""
        if X.ndim < 3 or any(d == 0 for d in X.shape[2:]):
            raise ShapeError(f"{self.op_type}: input X must be (N, C, *spatial) with at least "
                             f"one non-empty spatial axis, got shape {X.shape}")
        return X.reshape(X.shape[0], X.shape[1], -1)

    def forward(self, X):
        return self._planes(X).max(axis=2).reshape(X.shape[:2] + (1,) * (X.ndim - 2))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        planes = self._planes(X)
        d_planes = np.zeros_like(planes)
        if grads[0] is not None:
            # The whole gradient goes to the first maximum, as MaxPool's does.
            argmax = planes.argmax(axis=2)[:, :, None]
            np.put_along_axis(d_planes, argmax, grads[0].reshape(argmax.shape), axis=2)
        return [d_planes.reshape(X.shape)]
