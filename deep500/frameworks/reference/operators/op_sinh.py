"""Sinh: Y = sinh(X), dX = dY·cosh(X). https://onnx.ai/onnx/operators/onnx__Sinh.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Sinh")
class Sinh(Unary):
    function, derivative = np.sinh, np.cosh
