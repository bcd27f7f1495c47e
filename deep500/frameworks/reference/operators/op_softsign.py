"""Softsign: Y = X / (1 + |X|). https://onnx.ai/onnx/operators/onnx__Softsign.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Softsign")
class Softsign(Unary):
    def _forward(self, X):
        return X / (X.dtype.type(1) + np.abs(X))

    def _backward(self, dY, X, Y):
        return dY / np.square(X.dtype.type(1) + np.abs(X))
