"""QLinearConv: the quantized convolution ``saturate(round((conv(x - x_zero_point,
w - w_zero_point) + B) · x_scale · w_scale / y_scale) + y_zero_point)``, with Conv's
attributes (opset 10). https://onnx.ai/onnx/operators/onnx__QLinearConv.html

x, w and y are int8 or uint8, each with a zero point of its type (y's type is
y_zero_point's); x and y use scalar scales and zero points, w a scalar or one per output
channel. The optional int32 bias B is in the accumulator's scale (x_scale · w_scale, zero
point 0). The convolution is exact (the reference Conv in int64), the multiplier is
computed in the scales' type, rounding half to even. Gradients: none (quantized
operator); backward returns None.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_integer import (channel_operand,
                                                                       check_type, convolve,
                                                                       requantize, shifted)
from deep500.frameworks.reference.operators._op_common_quantize import check_zero_point
from deep500.frameworks.reference.operators.op_convinteger import CONV_DEFAULTS
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("QLinearConv")
class QLinearConv(ReferenceOp):
    defaults = dict(CONV_DEFAULTS)

    def _scalar(self, name, value):
        if value is not None and np.size(value) != 1:
            raise ShapeError(f"{self.op_type}: {name} must be a scalar, got shape "
                             f"{np.shape(value)}")
        return None if value is None else np.asarray(value).reshape(())

    def forward(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                y_zero_point=None, B=None):
        x, w = check_type(self.op_type, "x", x), check_type(self.op_type, "w", w)
        check_zero_point(self.op_type, "x_zero_point", x, x_zero_point)
        check_zero_point(self.op_type, "w_zero_point", w, w_zero_point)
        if y_zero_point is not None:
            check_type(self.op_type, "y_zero_point", y_zero_point)
        dtype = x.dtype if y_zero_point is None else y_zero_point.dtype
        x_scale, y_scale = self._scalar("x_scale", x_scale), self._scalar("y_scale", y_scale)
        x_zero_point = self._scalar("x_zero_point", x_zero_point)
        y_zero_point = self._scalar("y_zero_point", y_zero_point)
        w_scale = channel_operand(self.op_type, "w_scale", w, w_scale)
        if w_zero_point is not None:
            w_zero_point = channel_operand(self.op_type, "w_zero_point", w, w_zero_point)
        accumulated = convolve(self.op_type, shifted(x, x_zero_point),
                               shifted(w, w_zero_point), self.attributes)
        spatial = accumulated.ndim - 2
        if B is not None:
            B = np.asarray(B)
            if B.dtype != np.int32 or B.shape != (w.shape[0],):
                raise ShapeError(f"{self.op_type}: bias B must be int32 of shape "
                                 f"({w.shape[0]},), got {B.dtype} {B.shape}")
            accumulated = accumulated + B.astype(np.int64).reshape((-1,) + (1,) * spatial)
        w_scale = np.asarray(w_scale).reshape(np.shape(w_scale)[:1] + (1,) * spatial
                                              if np.ndim(w_scale) else ())
        return requantize(self.op_type, accumulated, (x_scale, w_scale), y_scale,
                          y_zero_point, dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None] * len(fwd_inputs)
