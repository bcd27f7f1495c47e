"""OptionalGetElement: the element of an optional input (a tensor or sequence input is
returned as it is); an empty optional is an error.
https://onnx.ai/onnx/operators/onnx__OptionalGetElement.html"""
from deep500.frameworks.reference.operators._op_common_sequence import (PassThrough,
                                                                         copy_value)
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error


@register("OptionalGetElement")
class OptionalGetElement(PassThrough):
    def forward(self, input=None):
        if input is None:
            raise Deep500Error(f"{self.op_type}: the optional input is empty; guard the "
                               f"node with OptionalHasElement (and If)")
        return (copy_value(input),)
