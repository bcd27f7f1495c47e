"""Sin: Y = sin(X), dX = dY·cos(X). https://onnx.ai/onnx/operators/onnx__Sin.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Sin")
class Sin(Unary):
    function, derivative = np.sin, np.cos
