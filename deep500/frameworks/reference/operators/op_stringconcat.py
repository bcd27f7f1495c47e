"""StringConcat: the elementwise concatenation X + Y of two string tensors, with
multidirectional broadcasting. https://onnx.ai/onnx/operators/onnx__StringConcat.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import broadcast_shape
from deep500.frameworks.reference.operators._op_common_text import strings
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("StringConcat")
class StringConcat(ReferenceOp):
    def forward(self, X, Y):
        X, Y = strings(X, self.op_type, "X"), strings(Y, self.op_type, "Y")
        shape = broadcast_shape(self.op_type, X, Y)
        # Object arrays add elementwise with Python's str +.
        return np.asarray(np.add(X, Y), dtype=object).reshape(shape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None, None]   # strings have no gradient
