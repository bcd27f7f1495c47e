"""Tan: Y = tan(X). https://onnx.ai/onnx/operators/onnx__Tan.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Tan")
class Tan(Unary):
    def _forward(self, X):
        return np.tan(X)

    def _backward(self, dY, X, Y):
        return dY * (Y.dtype.type(1) + Y * Y)
