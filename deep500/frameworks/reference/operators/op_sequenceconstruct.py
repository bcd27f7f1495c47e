"""SequenceConstruct: a sequence of the input tensors, in order (all of one element
type). https://onnx.ai/onnx/operators/onnx__SequenceConstruct.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import check_same_dtype
from deep500.frameworks.reference.operators._op_common_sequence import SequenceOp, tensor
from deep500.frameworks.reference.operators.registry import register


@register("SequenceConstruct")
class SequenceConstruct(SequenceOp):
    def forward(self, *inputs):
        tensors = [tensor(x, self.op_type, f"input {i}") for i, x in enumerate(inputs)]
        check_same_dtype(self.op_type, *tensors)
        return ([np.array(x, copy=True) for x in tensors],)
