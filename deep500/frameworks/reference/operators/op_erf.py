"""Erf: Y = erf(X) = 2/√π ∫₀ˣ exp(-t²) dt. https://onnx.ai/onnx/operators/onnx__Erf.html"""
import math

import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators._op_common_erf import erf, erf_float32
from deep500.frameworks.reference.operators.registry import register


@register("Erf")
class Erf(UnaryElementwise):
    def _forward(self, X):
        # NumPy has no erf. Float32 in float32 (within 4 eps(float32) of erf); other types
        # through the float64 one (within 2 ulp of math.erf) and back.
        if X.dtype == np.float32:
            return erf_float32(X)
        return np.asarray(erf(X.reshape(-1)), dtype=X.dtype).reshape(X.shape)

    def _backward(self, dY, X, Y):
        return dY * (X.dtype.type(2 / math.sqrt(math.pi)) * np.exp(-np.square(X)))
