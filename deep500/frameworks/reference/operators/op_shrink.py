"""Shrink: Y = X + bias for X < -lambd, X - bias for X > lambd, 0 otherwise; for float and
integer tensors (integers are computed in float64 and converted back).
https://onnx.ai/onnx/operators/onnx__Shrink.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary, is_integer
from deep500.frameworks.reference.operators.registry import register


@register("Shrink")
class Shrink(Unary):
    defaults = {"bias": 0.0, "lambd": 0.5}
    kinds = "fiu"

    def _forward(self, X):
        work = np.dtype(np.float64) if is_integer(X) else X.dtype
        values = X.astype(work, copy=False)
        lambd, bias = work.type(self.attr("lambd")), work.type(self.attr("bias"))
        zero = work.type(0)
        return np.where(values < -lambd, values + bias,
                        np.where(values > lambd, values - bias, zero))

    def _backward(self, dY, X, Y):
        lambd = X.dtype.type(self.attr("lambd"))
        return np.where(np.abs(X) > lambd, dY, X.dtype.type(0))
