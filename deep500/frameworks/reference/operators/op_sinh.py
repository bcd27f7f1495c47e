"""Sinh: Y = sinh(X). https://onnx.ai/onnx/operators/onnx__Sinh.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Sinh")
class Sinh(Unary):
    def _forward(self, X):
        return np.sinh(X)

    def _backward(self, dY, X, Y):
        return dY * np.cosh(X)
