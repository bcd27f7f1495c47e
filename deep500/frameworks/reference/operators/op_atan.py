"""Atan: Y = arctan(X). https://onnx.ai/onnx/operators/onnx__Atan.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Atan")
class Atan(Unary):
    def _forward(self, X):
        return np.arctan(X)

    def _backward(self, dY, X, Y):
        return dY / (X.dtype.type(1) + X * X)
