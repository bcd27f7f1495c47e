"""Cos: Y = cos(X). https://onnx.ai/onnx/operators/onnx__Cos.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Cos")
class Cos(Unary):
    def _forward(self, X):
        return np.cos(X)

    def _backward(self, dY, X, Y):
        return -dY * np.sin(X)
