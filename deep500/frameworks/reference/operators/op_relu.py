"""Relu: Y = max(X, 0), for float and signed integer tensors (opset 14).
https://onnx.ai/onnx/operators/onnx__Relu.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Relu")
class Relu(Unary):
    kinds = "fi"

    def _forward(self, X):
        return np.maximum(X, X.dtype.type(0))

    def _backward(self, dY, X, Y):
        return np.where(X > 0, dY, X.dtype.type(0))
