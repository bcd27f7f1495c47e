"""Hardmax (opset 13): 1 at the first maximum along ``axis``, 0 elsewhere, in the input's
dtype. https://onnx.ai/onnx/operators/onnx__Hardmax.html

The output is piecewise constant in the input, so its gradient is zero (where it exists).
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import normalize_axis
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Hardmax")
class Hardmax(ReferenceOp):
    defaults = {"axis": -1}

    def forward(self, input):
        input = np.asarray(input)
        axis = normalize_axis(self.op_type, self.attr("axis"), input.ndim)
        output = np.zeros_like(input)
        if input.size:
            first = np.expand_dims(np.argmax(input, axis=axis), axis)
            np.put_along_axis(output, first, 1, axis=axis)
        return output

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [np.zeros_like(np.asarray(fwd_inputs[0]))]
