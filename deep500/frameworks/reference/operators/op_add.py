"""Add: C = A + B with multidirectional broadcasting; dA = dB = dC (each summed over the
axes it was broadcast along). https://onnx.ai/onnx/operators/onnx__Add.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import BinaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Add")
class Add(BinaryElementwise):
    float_ufunc = np.add

    def _backward(self, dC, A, B, C):
        return dC, dC
