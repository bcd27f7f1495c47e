"""SequenceInsert: ``input_sequence`` with ``tensor`` inserted before ``position`` (in
``[-n, n]``; by default at the back). The tensor must have the sequence's element type.
https://onnx.ai/onnx/operators/onnx__SequenceInsert.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import check_same_dtype
from deep500.frameworks.reference.operators._op_common_sequence import (SequenceOp,
                                                                         position, sequence,
                                                                         tensor)
from deep500.frameworks.reference.operators.registry import register


@register("SequenceInsert")
class SequenceInsert(SequenceOp):
    def forward(self, input_sequence, value, index=None):
        tensors = sequence(input_sequence, self.op_type)
        value = tensor(value, self.op_type, "tensor")
        check_same_dtype(self.op_type, value, *tensors[:1])
        at = len(tensors) if index is None else position(index, len(tensors), self.op_type,
                                                         inserting=True)
        return (tensors[:at] + [np.array(value, copy=True)] + tensors[at:],)
