"""Reciprocal: Y = 1 / X. https://onnx.ai/onnx/operators/onnx__Reciprocal.html"""
from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Reciprocal")
class Reciprocal(Unary):
    def _forward(self, X):
        return X.dtype.type(1) / X

    def _backward(self, dY, X, Y):
        return -dY * Y * Y
