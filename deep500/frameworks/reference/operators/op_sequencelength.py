"""SequenceLength: the number of tensors in ``input_sequence``, an int64 scalar.
https://onnx.ai/onnx/operators/onnx__SequenceLength.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_sequence import SequenceOp, sequence
from deep500.frameworks.reference.operators.registry import register


@register("SequenceLength")
class SequenceLength(SequenceOp):
    def forward(self, input_sequence):
        return np.array(len(sequence(input_sequence, self.op_type)), dtype=np.int64)
