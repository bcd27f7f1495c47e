"""HardSwish: Y = X·max(0, min(1, X/6 + 1/2)).
https://onnx.ai/onnx/operators/onnx__HardSwish.html (Howard et al., Searching for
MobileNetV3, 2019)"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("HardSwish")
class HardSwish(Unary):
    def _gate(self, X):
        return np.clip(X / X.dtype.type(6) + X.dtype.type(0.5), 0, 1)

    def _forward(self, X):
        return X * self._gate(X)

    def _backward(self, dY, X, Y):
        # d/dX [X·gate(X)] = gate(X) + X·gate'(X), gate' = 1/6 for -3 < X < 3.
        slope = np.where(np.abs(X) < 3, X / X.dtype.type(6), X.dtype.type(0))
        return dY * (self._gate(X) + slope)
