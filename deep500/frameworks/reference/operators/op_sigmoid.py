"""Sigmoid: Y = 1 / (1 + exp(-X)). https://onnx.ai/onnx/operators/onnx__Sigmoid.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Sigmoid")
class Sigmoid(UnaryElementwise):
    def _forward(self, X):
        # exp(-|X|) <= 1 never overflows; e/(1+e) keeps precision for very negative X,
        # where 1 - 1/(1+exp(-X)) would cancel to 0.
        e = np.exp(-np.abs(X))
        one = X.dtype.type(1)
        return np.where(X >= 0, one / (one + e), e / (one + e))

    def _backward(self, dY, X, Y):
        return dY * Y * (Y.dtype.type(1) - Y)
