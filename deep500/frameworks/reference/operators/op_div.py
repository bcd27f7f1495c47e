"""Div: C = A / B (elementwise; integer division truncates) with multidirectional
broadcasting. https://onnx.ai/onnx/operators/onnx__Div.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import BinaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Div")
class Div(BinaryElementwise):
    float_ufunc = np.divide

    def _forward(self, A, B):
        if np.issubdtype(A.dtype, np.integer):
            # ONNX integer Div truncates toward zero; floor_divide would round down.
            return np.trunc(np.true_divide(A, B)).astype(A.dtype)
        return np.divide(A, B)

    def _backward(self, dC, A, B, C):
        dA = dC / B
        return dA, -dA * C
