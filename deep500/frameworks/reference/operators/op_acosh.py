"""Acosh: Y = arcosh(X), NaN below 1. https://onnx.ai/onnx/operators/onnx__Acosh.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Acosh")
class Acosh(Unary):
    def _forward(self, X):
        return np.arccosh(X)

    def _backward(self, dY, X, Y):
        return dY / np.sqrt(X * X - X.dtype.type(1))
