"""SequenceAt: the tensor at ``position`` of ``input_sequence`` (negative positions count
from the back). https://onnx.ai/onnx/operators/onnx__SequenceAt.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_sequence import (SequenceOp,
                                                                         position, sequence)
from deep500.frameworks.reference.operators.registry import register


@register("SequenceAt")
class SequenceAt(SequenceOp):
    def forward(self, input_sequence, index):
        tensors = sequence(input_sequence, self.op_type)
        return np.array(tensors[position(index, len(tensors), self.op_type)], copy=True)
