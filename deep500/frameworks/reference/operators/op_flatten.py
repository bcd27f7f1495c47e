"""Flatten: reshape to 2-D (d_0···d_{axis-1}, d_axis···d_{n-1}).
https://onnx.ai/onnx/operators/onnx__Flatten.html"""
import math

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Flatten")
class Flatten(ReferenceOp):
    defaults = {"axis": 1}

    def forward(self, input):
        input = np.asarray(input)
        axis, rank = self.attr("axis"), input.ndim
        if not -rank <= axis <= rank:
            raise ShapeError(f"{self.op_type}: axis {axis} is outside [{-rank}, {rank}] for "
                             f"an input of shape {input.shape}")
        if axis < 0:
            axis += rank
        # A copy, so that the output never aliases the input.
        return input.reshape(math.prod(input.shape[:axis]),
                             math.prod(input.shape[axis:])).copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [np.asarray(grads[0]).reshape(np.shape(fwd_inputs[0]))]
