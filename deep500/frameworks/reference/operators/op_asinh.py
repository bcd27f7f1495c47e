"""Asinh: Y = arsinh(X). https://onnx.ai/onnx/operators/onnx__Asinh.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Asinh")
class Asinh(Unary):
    def _forward(self, X):
        return np.arcsinh(X)

    def _backward(self, dY, X, Y):
        return dY / np.sqrt(X * X + X.dtype.type(1))
