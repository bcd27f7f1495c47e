"""Identity: output = input, a tensor, a sequence or an optional.
https://onnx.ai/onnx/operators/onnx__Identity.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_sequence import (copy_value,
                                                                         is_sequence)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Identity")
class Identity(ReferenceOp):
    def forward(self, input):
        # A copy, so that the output never aliases the input.
        if input is None or is_sequence(input):
            return (copy_value(input),)   # one output, not a list of outputs
        return np.array(input, copy=True)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if fwd_inputs[0] is None or is_sequence(fwd_inputs[0]):
            return [None]   # gradients flow through tensors only
        if grads[0] is None:
            return [np.zeros_like(fwd_inputs[0])]
        # A copy: a graph executor may accumulate into the returned gradient in place.
        return [np.array(grads[0], copy=True)]
