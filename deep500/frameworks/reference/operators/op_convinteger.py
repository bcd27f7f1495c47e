"""ConvInteger: the convolution of ``x - x_zero_point`` by ``w - w_zero_point`` (int8 or
uint8) as int32, with Conv's attributes (opset 10).
https://onnx.ai/onnx/operators/onnx__ConvInteger.html

x_zero_point is a scalar; w_zero_point a scalar or one value per output channel.
Padding adds zeros to the shifted input (that is, x_zero_point to x). The convolution is
the reference Conv in int64; the int32 accumulation wraps. Gradients: none (integer
operator); backward returns None.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_integer import (channel_operand,
                                                                       check_type, convolve,
                                                                       shifted, wrap_int32)
from deep500.frameworks.reference.operators._op_common_quantize import check_zero_point
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError

CONV_DEFAULTS = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                 "pads": None, "strides": None}


@register("ConvInteger")
class ConvInteger(ReferenceOp):
    defaults = dict(CONV_DEFAULTS)

    def forward(self, x, w, x_zero_point=None, w_zero_point=None):
        x, w = check_type(self.op_type, "x", x), check_type(self.op_type, "w", w)
        check_zero_point(self.op_type, "x_zero_point", x, x_zero_point)
        check_zero_point(self.op_type, "w_zero_point", w, w_zero_point)
        if x_zero_point is not None and np.size(x_zero_point) != 1:
            raise ShapeError(f"{self.op_type}: x_zero_point must be a scalar, got shape "
                             f"{np.shape(x_zero_point)}")
        if w_zero_point is not None:
            w_zero_point = channel_operand(self.op_type, "w_zero_point", w, w_zero_point)
        if x_zero_point is not None:
            x_zero_point = np.asarray(x_zero_point).reshape(())
        return wrap_int32(convolve(self.op_type, shifted(x, x_zero_point),
                                   shifted(w, w_zero_point), self.attributes))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None] * len(fwd_inputs)
