"""Gelu (opset 20): Y = 0.5·X·(1 + erf(X/√2)), or with approximate="tanh"
Y = 0.5·X·(1 + tanh(√(2/π)·(X + 0.044715·X³))) (Hendrycks & Gimpel,
https://arxiv.org/abs/1606.08415). https://onnx.ai/onnx/operators/onnx__Gelu.html"""
import math

import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators._op_common_erf import erf
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error

_TANH_C = 0.044715


@register("Gelu")
class Gelu(UnaryElementwise):
    defaults = {"approximate": "none"}

    def _mode(self) -> str:
        mode = self.attr("approximate")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        if mode not in ("none", "tanh"):
            raise Deep500Error(f"{self.op_type}: approximate={mode!r} is not supported; ONNX "
                               f"allows 'none' (exact, erf) or 'tanh'")
        return mode

    def _forward(self, X):
        t = X.dtype.type
        if self._mode() == "none":
            wide = X.astype(np.float64)
            cdf = 0.5 * (1.0 + erf(wide * math.sqrt(0.5)))
            return (wide * cdf).astype(X.dtype)
        inner = t(math.sqrt(2 / math.pi)) * (X + t(_TANH_C) * X * X * X)
        return t(0.5) * X * (t(1) + np.tanh(inner))

    def _backward(self, dY, X, Y):
        if self._mode() == "none":
            wide = X.astype(np.float64)
            cdf = 0.5 * (1.0 + erf(wide * math.sqrt(0.5)))
            pdf = np.exp(-0.5 * wide * wide) / math.sqrt(2 * math.pi)
            return dY * (cdf + wide * pdf).astype(X.dtype)
        t = X.dtype.type
        k = t(math.sqrt(2 / math.pi))
        th = np.tanh(k * (X + t(_TANH_C) * X * X * X))
        d_inner = k * (t(1) + t(3 * _TANH_C) * X * X)
        return dY * (t(0.5) * (t(1) + th) + t(0.5) * X * (t(1) - th * th) * d_inner)
