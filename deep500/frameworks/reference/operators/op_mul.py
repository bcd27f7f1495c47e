"""Mul: C = A * B (elementwise) with multidirectional broadcasting.
https://onnx.ai/onnx/operators/onnx__Mul.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import BinaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Mul")
class Mul(BinaryElementwise):
    float_ufunc = np.multiply

    def _forward(self, A, B):
        return np.multiply(A, B)

    def _backward(self, dC, A, B, C):
        return dC * B, dC * A
