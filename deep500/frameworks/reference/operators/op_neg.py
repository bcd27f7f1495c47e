"""Neg: Y = -X. https://onnx.ai/onnx/operators/onnx__Neg.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Neg")
class Neg(UnaryElementwise):
    def _forward(self, X):
        return np.negative(X)

    def _backward(self, dY, X, Y):
        return np.negative(dY)
