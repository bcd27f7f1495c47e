"""Sub: C = A - B with multidirectional broadcasting; dA = dC and dB = -dC (each summed
over the axes it was broadcast along). https://onnx.ai/onnx/operators/onnx__Sub.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import BinaryElementwise
from deep500.frameworks.reference.operators.registry import register


@register("Sub")
class Sub(BinaryElementwise):
    float_ufunc = np.subtract

    def _backward(self, dC, A, B, C):
        return dC, -dC
