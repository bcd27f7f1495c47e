"""Elu: Y = alpha·(exp(X) - 1) for X < 0, X otherwise.
https://onnx.ai/onnx/operators/onnx__Elu.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Elu")
class Elu(Unary):
    defaults = {"alpha": 1.0}

    def _forward(self, X):
        return np.where(X < 0, self.scalar("alpha", X) * np.expm1(X), X)

    def _backward(self, dY, X, Y):
        return np.where(X < 0, dY * self.scalar("alpha", X) * np.exp(X), dY)
