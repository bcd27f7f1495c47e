"""Tanh: Y = tanh(X). https://onnx.ai/onnx/operators/onnx__Tanh.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Tanh")
class Tanh(UnaryElementwise):
    def _forward(self, X):
        return np.tanh(X)

    def _backward(self, dY, X, Y):
        return dY * (Y.dtype.type(1) - Y * Y)
