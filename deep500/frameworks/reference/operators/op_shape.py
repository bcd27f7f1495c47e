"""Shape (opset 15): the input's shape as a 1-D int64 tensor, optionally only dimensions
[start, end) (negative values count from the end; both are clamped to [0, rank]).
https://onnx.ai/onnx/operators/onnx__Shape.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Shape")
class Shape(ReferenceOp):
    defaults = {"end": None, "start": 0}

    def forward(self, data):
        # Python slicing adds the rank to negative bounds and clamps, as ONNX specifies.
        return np.array(np.shape(data)[self.attr("start"):self.attr("end")], dtype=np.int64)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]
