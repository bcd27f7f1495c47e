"""Exp: Y = exp(X). https://onnx.ai/onnx/operators/onnx__Exp.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Exp")
class Exp(UnaryElementwise):
    def _forward(self, X):
        return np.exp(X)

    def _backward(self, dY, X, Y):
        return dY * Y
