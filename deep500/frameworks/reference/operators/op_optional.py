"""Optional: an optional holding ``input``, or, without it, an empty optional of the
type the ``type`` attribute names. https://onnx.ai/onnx/operators/onnx__Optional.html

The reference carries an optional as its element, an empty one as None (see
``_op_common_sequence.py``), so the operator passes its input on; the gradient of a
tensor element passes back unchanged."""
from deep500.frameworks.reference.operators._op_common_sequence import (PassThrough,
                                                                         copy_value)
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error


@register("Optional")
class Optional(PassThrough):
    defaults = {"type": None}

    def forward(self, input=None):
        if input is None and self.attr("type") is None:
            raise Deep500Error(f"{self.op_type}: without an input, the node must name the "
                               f"empty optional's element type (attribute 'type')")
        return (copy_value(input),)
