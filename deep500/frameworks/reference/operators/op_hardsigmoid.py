"""HardSigmoid: Y = max(0, min(1, alpha·X + beta)).
https://onnx.ai/onnx/operators/onnx__HardSigmoid.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("HardSigmoid")
class HardSigmoid(Unary):
    # ONNX float attributes are float32: the default alpha is float32(0.2).
    defaults = {"alpha": float(np.float32(0.2)), "beta": 0.5}

    def _linear(self, X):
        return self.scalar("alpha", X) * X + self.scalar("beta", X)

    def _forward(self, X):
        return np.clip(self._linear(X), 0, 1)

    def _backward(self, dY, X, Y):
        inside = np.abs(self._linear(X) - X.dtype.type(0.5)) < 0.5   # 0 < alpha·X + beta < 1
        return np.where(inside, dY * self.scalar("alpha", X), X.dtype.type(0))
