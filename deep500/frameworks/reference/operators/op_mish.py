"""Mish: Y = X·tanh(softplus(X)). https://onnx.ai/onnx/operators/onnx__Mish.html
(Misra, Mish: A Self Regularized Non-Monotonic Activation Function, 2019)"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import (Unary, sigmoid,
                                                                           softplus)
from deep500.frameworks.reference.operators.registry import register


@register("Mish")
class Mish(Unary):
    def _forward(self, X):
        return X * np.tanh(softplus(X))

    def _backward(self, dY, X, Y):
        # softplus' = sigmoid, tanh' = 1 - tanh².
        t = np.tanh(softplus(X))
        return dY * (t + X * sigmoid(X) * (X.dtype.type(1) - t * t))
