"""SequenceErase: ``input_sequence`` without the tensor at ``position`` (in ``[-n, n-1]``;
by default the last). https://onnx.ai/onnx/operators/onnx__SequenceErase.html"""
from deep500.frameworks.reference.operators._op_common_sequence import (SequenceOp,
                                                                         position, sequence)
from deep500.frameworks.reference.operators.registry import register


@register("SequenceErase")
class SequenceErase(SequenceOp):
    def forward(self, input_sequence, index=None):
        tensors = sequence(input_sequence, self.op_type)
        at = position(-1 if index is None else index, len(tensors), self.op_type)
        return (tensors[:at] + tensors[at + 1:],)
