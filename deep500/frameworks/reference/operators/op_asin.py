"""Asin: Y = arcsin(X), NaN outside [-1, 1]. https://onnx.ai/onnx/operators/onnx__Asin.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Asin")
class Asin(Unary):
    def _forward(self, X):
        return np.arcsin(X)

    def _backward(self, dY, X, Y):
        return dY / np.sqrt(X.dtype.type(1) - X * X)
