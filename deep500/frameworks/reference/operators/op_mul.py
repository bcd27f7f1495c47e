"""Mul: C = A · B (elementwise) with multidirectional broadcasting; dA = dC · B and
dB = dC · A (each summed over the axes it was broadcast along).
https://onnx.ai/onnx/operators/onnx__Mul.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import BinaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Mul")
class Mul(BinaryElementwise):
    float_ufunc = np.multiply

    def _backward(self, dC, A, B, C):
        return dC * B, dC * A
