"""Sin: Y = sin(X). https://onnx.ai/onnx/operators/onnx__Sin.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Sin")
class Sin(Unary):
    def _forward(self, X):
        return np.sin(X)

    def _backward(self, dY, X, Y):
        return dY * np.cos(X)
