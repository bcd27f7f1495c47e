"""LpNormalization (opset 22): Y = X / ||X||_p along ``axis``, p = 1 or 2; zero where the
norm is zero (an all-zero slice).
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
        return self._safe_divide(X, norm).astype(X.dtype, copy=False)

    @staticmethod
    def _safe_divide(a, norm):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(norm == 0, a.dtype.type(0), a / norm)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        if grads[0] is None:
            return [np.zeros_like(X)]
        axis, norm = self._norm(X)
        dY = grads[0]
        dot = np.sum(dY * X, axis=axis, keepdims=True)
        # An all-zero slice (norm 0) has output 0 and, taken as constant there, gradient 0.
        if self.attr("p") == 1:
            dX = self._safe_divide(dY - np.sign(X) * self._safe_divide(dot, norm), norm)
        else:
            dX = self._safe_divide(dY - X * self._safe_divide(dot, norm * norm), norm)
        return [dX.astype(X.dtype, copy=False)]
