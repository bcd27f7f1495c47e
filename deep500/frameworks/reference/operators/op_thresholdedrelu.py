"""ThresholdedRelu: Y = X for X > alpha, 0 otherwise.
https://onnx.ai/onnx/operators/onnx__ThresholdedRelu.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("ThresholdedRelu")
class ThresholdedRelu(Unary):
    defaults = {"alpha": 1.0}

    def _forward(self, X):
        return np.where(X > self.scalar("alpha", X), X, X.dtype.type(0))

    def _backward(self, dY, X, Y):
        return np.where(X > self.scalar("alpha", X), dY, X.dtype.type(0))
