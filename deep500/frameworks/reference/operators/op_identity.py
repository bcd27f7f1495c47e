"""Identity: output = input. https://onnx.ai/onnx/operators/onnx__Identity.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import UnsupportedError


@register("Identity")
class Identity(ReferenceOp):
    def forward(self, input):
        if isinstance(input, (list, tuple)):
            raise UnsupportedError(f"{self.op_type}: the reference operators work on tensors, "
                                   f"not on sequences")
        # A copy, so that the output never aliases the input.
        return np.array(input, copy=True)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if grads[0] is None:
            return [np.zeros_like(fwd_inputs[0])]
        # A copy: a graph executor may accumulate into the returned gradient in place.
        return [np.array(grads[0], copy=True)]
