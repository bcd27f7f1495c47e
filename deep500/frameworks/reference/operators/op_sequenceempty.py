"""SequenceEmpty: an empty sequence of tensors of element type ``dtype`` (FLOAT by
default). https://onnx.ai/onnx/operators/onnx__SequenceEmpty.html

The reference carries a sequence as a Python list, which keeps no element type: the
empty sequence is ``[]`` whatever ``dtype`` says."""
from deep500.frameworks.reference.operators._op_common_sequence import SequenceOp
from deep500.frameworks.reference.operators.registry import register


@register("SequenceEmpty")
class SequenceEmpty(SequenceOp):
    defaults = {"dtype": None}

    def forward(self):
        return ([],)
