"""EyeLike: a matrix of the input's (2-D) shape with ones on diagonal ``k`` and zeros
elsewhere, of type ``dtype`` (a TensorProto data type; default: the input's).
https://onnx.ai/onnx/operators/onnx__EyeLike.html"""
import numpy as np
from onnx import helper

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("EyeLike")
class EyeLike(ReferenceOp):
    defaults = {"dtype": None, "k": 0}

    def forward(self, input):
        input = np.asarray(input)
        if input.ndim != 2:
            raise ShapeError(f"{self.op_type}: the input must be 2-D, got shape {input.shape}")
        dtype = input.dtype if self.attr("dtype") is None else \
            helper.tensor_dtype_to_np_dtype(int(self.attr("dtype")))
        return np.eye(*input.shape, k=int(self.attr("k")), dtype=dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]   # the output does not depend on the input's values
