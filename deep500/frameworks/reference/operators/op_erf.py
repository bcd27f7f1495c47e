"""Erf: Y = erf(X) = 2/√π ∫₀ˣ exp(-t²) dt. https://onnx.ai/onnx/operators/onnx__Erf.html"""
import math

import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators.registry import register

# NumPy has no erf; the C library's (through math.erf) is exact to double precision.
_erf = np.frompyfunc(math.erf, 1, 1)


@register("Erf")
class Erf(UnaryElementwise):
    def _forward(self, X):
        return np.asarray(_erf(X), dtype=X.dtype)

    def _backward(self, dY, X, Y):
        return dY * (X.dtype.type(2 / math.sqrt(math.pi)) * np.exp(-np.square(X)))
