"""Celu: Y = max(0, X) + min(0, alpha·(exp(X/alpha) - 1)).
https://onnx.ai/onnx/operators/onnx__Celu.html (Barron, Continuously Differentiable
Exponential Linear Units, 2017)"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error


@register("Celu")
class Celu(Unary):
    defaults = {"alpha": 1.0}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        if self.attr("alpha") == 0:
            raise Deep500Error("Celu: alpha must be nonzero (the operator divides by it)")

    def _forward(self, X):
        alpha = self.scalar("alpha", X)
        return np.maximum(X, 0) + np.minimum(alpha * np.expm1(X / alpha), 0)

    def _backward(self, dY, X, Y):
        alpha = self.scalar("alpha", X)
        return np.where(X > 0, dY, dY * np.exp(X / alpha))
