"""Sqrt: Y = √X. https://onnx.ai/onnx/operators/onnx__Sqrt.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Sqrt")
class Sqrt(UnaryElementwise):
    def _forward(self, X):
        return np.sqrt(X)

    def _backward(self, dY, X, Y):
        return dY * Y.dtype.type(0.5) / Y
