"""Cosh: Y = cosh(X), dX = dY·sinh(X). https://onnx.ai/onnx/operators/onnx__Cosh.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Cosh")
class Cosh(Unary):
    function, derivative = np.cosh, np.sinh
