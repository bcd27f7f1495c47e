"""MeanVarianceNormalization (opset 13): Y = (X - E[X]) / (sqrt(E[(X - E[X])²]) + 1e-9), the
expectations over ``axes`` (default [0, 2, 3]); the 1e-9 is the one of ONNX's function body.
https://onnx.ai/onnx/operators/onnx__MeanVarianceNormalization.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_norm import working_dtype
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError

_EPSILON = 1e-9


@register("MeanVarianceNormalization")
class MeanVarianceNormalization(ReferenceOp):
    defaults = {"axes": [0, 2, 3]}

    def _axes(self, X) -> tuple:
        axes = [int(a) for a in np.atleast_1d(self.attr("axes"))]
        bad = [a for a in axes if not -X.ndim <= a < X.ndim]
        if bad:
            raise ShapeError(f"{self.op_type}: axes {bad} are out of range for X of shape "
                             f"{X.shape} (valid: {-X.ndim} to {X.ndim - 1})")
        return tuple(sorted({a % X.ndim for a in axes}))

    def _statistics(self, X):
        axes = self._axes(X)
        X = X.astype(working_dtype(X), copy=False)
        centered = X - np.mean(X, axis=axes, keepdims=True)
        std = np.sqrt(np.mean(centered * centered, axis=axes, keepdims=True))
        return axes, centered, std, std + X.dtype.type(_EPSILON)

    def forward(self, X):
        _, centered, _, denominator = self._statistics(X)
        return (centered / denominator).astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        if grads[0] is None:
            return [np.zeros_like(X)]
        axes, centered, std, denominator = self._statistics(X)
        t = centered.dtype.type
        count = t(centered.size // std.size)
        d_centered = grads[0].astype(centered.dtype, copy=False) / denominator
        d_std = -np.sum(d_centered * centered, axis=axes, keepdims=True) / denominator
        # d std / d X = (X - mean) / (count · std); the mean's share sums to zero.
        with np.errstate(divide="ignore", invalid="ignore"):
            via_std = np.where(std > 0, d_std / (count * std), t(0)) * centered
        dX = d_centered - np.mean(d_centered, axis=axes, keepdims=True) + via_std
        return [dX.astype(X.dtype, copy=False)]
