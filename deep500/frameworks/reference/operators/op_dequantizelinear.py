"""DequantizeLinear: ``y = (x - x_zero_point) * x_scale``, per tensor, per axis or in
blocks (opsets 10 to 28). https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html

x is int8, uint8, int16, uint16, int32 (no zero point), int4, uint4, int2, uint2, a float8
type, FLOAT4E2M1 or a float6 type; the zero point has x's type. The output type is
``output_dtype``, else the scale's (float32, float16 or bfloat16; a FLOAT8E8M0 scale
needs ``output_dtype``). The difference ``x - x_zero_point`` is exact; it and the scale
are then converted to float32 and multiplied in float32, and the product is rounded to
the output type. The page says the output type sets the multiplication's precision;
float32 for the float16 and bfloat16 outputs too (one extra rounding at most) is what
ONNX's own evaluator and ONNX Runtime do, and what ONNX's test data expect (a float64
scale, beyond the spec's types, multiplies in float64).
Granularity is in ``_op_common_quantize``.

Gradients: w.r.t. x_scale, ``sum(dy * (x - x_zero_point))`` over the elements each scale
covers; w.r.t. x, ``dy * x_scale`` converted to x's type where x is a float8/float4/float6
type, None for integer x (not differentiable); None for the zero point (an integer, or
a float8 zero that ONNX fixes at 0) and for a FLOAT8E8M0 scale (powers of two only).
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import is_floating
from deep500.frameworks.reference.operators._op_common_quantize import (E8M0, QUANTIZED,
                                                                        check_pair,
                                                                        check_zero_point,
                                                                        expand, reduce_to,
                                                                        type_name, widen)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.cast import convert, target_dtype

_READS = QUANTIZED | {np.dtype(np.int32)}


@register("DequantizeLinear")
class DequantizeLinear(ReferenceOp):
    defaults = {"axis": 1, "block_size": 0, "output_dtype": 0}

    def _check(self, x, x_scale, x_zero_point):
        if x.dtype not in _READS:
            raise ShapeError(f"{self.op_type}: x has type {x.dtype}; it must be one of "
                             f"{sorted(type_name(t) for t in _READS)}")
        check_zero_point(self.op_type, "x_zero_point", x, x_zero_point)
        check_pair(self.op_type, "x_scale", "x_zero_point", x_scale, x_zero_point)
        if self.attr("output_dtype"):
            dtype = target_dtype(self.op_type, self.attr("output_dtype"))
        elif x_scale.dtype == E8M0:
            raise ShapeError(f"{self.op_type}: a float8e8m0 x_scale needs output_dtype "
                             f"(FLOAT, FLOAT16 or BFLOAT16)")
        else:
            dtype = x_scale.dtype
        if not is_floating(dtype) or dtype == E8M0 or dtype.itemsize < 2:
            raise ShapeError(f"{self.op_type}: the output type must be float32, float16 or "
                             f"bfloat16, got {dtype}")
        return dtype

    def _shifted(self, x, x_zero_point):
        """x - x_zero_point, exactly, in int64 or float64."""
        axis, block = int(self.attr("axis")), int(self.attr("block_size"))
        values = widen(x)
        if x_zero_point is not None:
            values = values - widen(expand(self.op_type, "x_zero_point", x_zero_point,
                                           x.shape, axis, block))
        return values

    def forward(self, x, x_scale, x_zero_point=None):
        x, x_scale = np.asarray(x), np.asarray(x_scale)
        dtype = self._check(x, x_scale, x_zero_point)
        scale = expand(self.op_type, "x_scale", x_scale, x.shape, int(self.attr("axis")),
                       int(self.attr("block_size")))
        work = np.float64 if dtype == np.float64 else np.float32
        shifted = self._shifted(x, x_zero_point).astype(work)
        return (shifted * widen(scale).astype(work)).astype(dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, x_scale = np.asarray(fwd_inputs[0]), np.asarray(fwd_inputs[1])
        x_zero_point = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        self._check(x, x_scale, x_zero_point)
        rest = [None] * (len(fwd_inputs) - 2)
        if grads[0] is None:
            return [None, np.zeros_like(x_scale)] + rest
        axis, block = int(self.attr("axis")), int(self.attr("block_size"))
        dy = widen(grads[0])
        d_scale = None
        if x_scale.dtype != E8M0:
            d_scale = reduce_to(self.op_type, dy * self._shifted(x, x_zero_point),
                                x_scale.shape, axis, block).astype(x_scale.dtype)
        d_x = None
        if is_floating(x.dtype):
            scale = expand(self.op_type, "x_scale", x_scale, x.shape, axis, block)
            d_x = convert(dy * widen(scale), x.dtype)
        return [d_x, d_scale] + rest
