"""Abs: Y = |X|, for float and integer tensors (the most negative signed integer stays
itself, as in two's complement). https://onnx.ai/onnx/operators/onnx__Abs.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Abs")
class Abs(Unary):
    kinds = "fiu"

    def _forward(self, X):
        return np.abs(X)

    def _backward(self, dY, X, Y):
        return dY * np.sign(X)
