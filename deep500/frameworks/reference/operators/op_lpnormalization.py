"""LpNormalization (opset 22): Y = X / ||X||_p along ``axis``, p = 1 or 2.
https://onnx.ai/onnx/operators/onnx__LpNormalization.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_norm import normalized_axes
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error


@register("LpNormalization")
class LpNormalization(ReferenceOp):
    defaults = {"axis": -1, "p": 2}

    def _norm(self, X):
        p = self.attr("p")
        if p not in (1, 2):
            raise Deep500Error(f"{self.op_type}: p={p} is not supported; ONNX allows p=1 or 2")
        axis = normalized_axes(self.op_type, self.attr("axis"), X.ndim)[0]
        if p == 1:
            return axis, np.sum(np.abs(X), axis=axis, keepdims=True)
        return axis, np.sqrt(np.sum(X * X, axis=axis, keepdims=True))

    def forward(self, X):
        _, norm = self._norm(X)
        return (X / norm).astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        if grads[0] is None:
            return [np.zeros_like(X)]
        axis, norm = self._norm(X)
        dY = grads[0]
        dot = np.sum(dY * X, axis=axis, keepdims=True)
        if self.attr("p") == 1:
            dX = dY / norm - np.sign(X) * dot / (norm * norm)
        else:
            dX = dY / norm - X * dot / (norm * norm * norm)
        return [dX.astype(X.dtype, copy=False)]
