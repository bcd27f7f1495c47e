"""Softplus: Y = ln(exp(X) + 1). https://onnx.ai/onnx/operators/onnx__Softplus.html"""
from deep500.frameworks.reference.operators._op_common_activation import (Unary, sigmoid,
                                                                           softplus)
from deep500.frameworks.reference.operators.registry import register


@register("Softplus")
class Softplus(Unary):
    def _forward(self, X):
        return softplus(X)

    def _backward(self, dY, X, Y):
        return dY * sigmoid(X)
