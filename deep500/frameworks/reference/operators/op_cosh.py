"""Cosh: Y = cosh(X). https://onnx.ai/onnx/operators/onnx__Cosh.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Cosh")
class Cosh(Unary):
    def _forward(self, X):
        return np.cosh(X)

    def _backward(self, dY, X, Y):
        return dY * np.sinh(X)
