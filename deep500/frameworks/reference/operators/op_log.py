"""Log: Y = ln(X). https://onnx.ai/onnx/operators/onnx__Log.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import UnaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Log")
class Log(UnaryElementwise):
    def _forward(self, X):
        return np.log(X)

    def _backward(self, dY, X, Y):
        return dY / X
