"""LeakyRelu: Y = X for X >= 0, alpha·X otherwise.
https://onnx.ai/onnx/operators/onnx__LeakyRelu.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("LeakyRelu")
class LeakyRelu(UnaryElementwise):
    defaults = {"alpha": 0.01}

    def _forward(self, X):
        return np.where(X >= 0, X, X * X.dtype.type(self.attr("alpha")))

    def _backward(self, dY, X, Y):
        return np.where(X > 0, dY, dY * X.dtype.type(self.attr("alpha")))
