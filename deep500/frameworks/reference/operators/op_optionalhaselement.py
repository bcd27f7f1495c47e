"""OptionalHasElement: true where the optional input holds an element, false where it is
empty or not given at all (a tensor or sequence input always has one).
https://onnx.ai/onnx/operators/onnx__OptionalHasElement.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_sequence import SequenceOp
from deep500.frameworks.reference.operators.registry import register


@register("OptionalHasElement")
class OptionalHasElement(SequenceOp):
    def forward(self, input=None):
        return np.array(input is not None)
