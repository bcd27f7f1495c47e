"""ConstantOfShape: a tensor of the shape given by the int64 input, filled with the single
element of the ``value`` attribute (default: float32 zero).
https://onnx.ai/onnx/operators/onnx__ConstantOfShape.html"""
import numpy as np
import onnx
from onnx import numpy_helper

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("ConstantOfShape")
class ConstantOfShape(ReferenceOp):
    defaults = {"value": None}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        value = self.attr("value")
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        value = np.zeros(1, np.float32) if value is None else np.asarray(value)
        if value.size != 1:
            raise ShapeError(f"{self.op_type}: value must hold exactly one element, got "
                             f"shape {value.shape}")
        self.fill = value.reshape(-1)[0]

    def forward(self, input):
        shape = [int(d) for d in np.asarray(input).reshape(-1)]
        if any(d < 0 for d in shape):
            raise ShapeError(f"{self.op_type}: shape {shape} has negative dimensions")
        return np.full(shape, self.fill, dtype=self.fill.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]
