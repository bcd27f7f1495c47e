"""Atanh: Y = artanh(X), NaN outside [-1, 1].
https://onnx.ai/onnx/operators/onnx__Atanh.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Atanh")
class Atanh(Unary):
    def _forward(self, X):
        return np.arctanh(X)

    def _backward(self, dY, X, Y):
        return dY / (X.dtype.type(1) - X * X)
