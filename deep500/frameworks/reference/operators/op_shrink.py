"""Shrink: Y = X + bias for X < -lambd, X - bias for X > lambd, 0 otherwise; for float and
integer tensors (with a fractional bias, integers are computed in float64 and truncated
back, as onnx's evaluator does).
https://onnx.ai/onnx/operators/onnx__Shrink.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary, is_integer
from deep500.frameworks.reference.operators.registry import register


@register("Shrink")
class Shrink(Unary):
    defaults = {"bias": 0.0, "lambd": 0.5}
    kinds = "fiu"

    def _forward(self, X):
        lambd, bias = self.attr("lambd"), self.attr("bias")
        if is_integer(X) and float(bias).is_integer():
            # Exact in the integer type, even beyond float64's 2^53.
            shift = X.dtype.type(abs(int(bias)))
            plus, minus = (X + shift, X - shift) if bias >= 0 else (X - shift, X + shift)
            zero = X.dtype.type(0)
            return np.where(X < -lambd, plus, np.where(X > lambd, minus, zero))
        work = np.dtype(np.float64) if is_integer(X) else X.dtype
        values = X.astype(work, copy=False)
        lambd, bias, zero = work.type(lambd), work.type(bias), work.type(0)
        return np.where(values < -lambd, values + bias,
                        np.where(values > lambd, values - bias, zero))

    def _backward(self, dY, X, Y):
        lambd = X.dtype.type(self.attr("lambd"))
        return np.where(np.abs(X) > lambd, dY, X.dtype.type(0))
