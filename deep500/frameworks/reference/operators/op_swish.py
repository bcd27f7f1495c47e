"""Swish: Y = X·sigmoid(alpha·X). https://onnx.ai/onnx/operators/onnx__Swish.html
(Ramachandran et al., Searching for Activation Functions, 2017)"""
from deep500.frameworks.reference.operators._op_common_activation import Unary, sigmoid
from deep500.frameworks.reference.operators.registry import register


@register("Swish")
class Swish(Unary):
    defaults = {"alpha": 1.0}

    def _forward(self, X):
        return X * sigmoid(self.scalar("alpha", X) * X)

    def _backward(self, dY, X, Y):
        alpha = self.scalar("alpha", X)
        s = sigmoid(alpha * X)
        return dY * (s + alpha * X * s * (X.dtype.type(1) - s))
