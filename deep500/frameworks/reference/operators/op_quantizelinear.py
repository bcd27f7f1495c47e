"""QuantizeLinear: ``y = saturate(round(x / y_scale) + y_zero_point)``, rounding half to
even, per tensor, per axis or in blocks (opsets 10 to 28).
https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html

The output type is the zero point's, else ``output_dtype``, else uint8: int8, uint8,
int16, uint16, int4, uint4, int2, uint2 (saturating to their ranges), the float8 types
(``saturate``: out-of-range values become ± the largest finite value, without it NaN, or
±inf for E5M2), FLOAT4E2M1 and the float6 types (always saturating). The division runs
in the ``precision`` type, else the scale's type, as the page says (ONNX's own evaluator
divides in NumPy's promoted type, which differs for a float32 x and a float16 or
bfloat16 scale). A float8 zero point is added as the formula says (ONNX's evaluator
ignores it; it is meant to be 0). NaN quotients have no defined integer result; they
become the zero point. Granularity is in ``_op_common_quantize``.

Gradients: none. The output is a step function of x, y_scale and y_zero_point (zero
almost everywhere, undefined at the steps) and ONNX defines no gradient; a
straight-through estimator is a training choice, not this operator, so backward returns
None for every input.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import is_floating
from deep500.frameworks.reference.operators._op_common_quantize import (check_pair, divide,
                                                                        expand,
                                                                        output_type,
                                                                        saturate)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError


@register("QuantizeLinear")
class QuantizeLinear(ReferenceOp):
    defaults = {"axis": 1, "block_size": 0, "output_dtype": 0, "precision": 0,
                "saturate": 1}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        if self.attr("saturate") not in (0, 1, True, False):
            raise Deep500Error(f"{self.op_type}: saturate must be 0 or 1, got "
                               f"{self.attr('saturate')!r}")

    def forward(self, x, y_scale, y_zero_point=None):
        x, y_scale = np.asarray(x), np.asarray(y_scale)
        if not (is_floating(x.dtype) or x.dtype == np.int32):
            raise ShapeError(f"{self.op_type}: x must be float, float16, bfloat16 or int32, "
                             f"got {x.dtype}")
        dtype = output_type(self.op_type, y_zero_point, self.attr("output_dtype"))
        axis, block = int(self.attr("axis")), int(self.attr("block_size"))
        check_pair(self.op_type, "y_scale", "y_zero_point", y_scale, y_zero_point)
        scale = expand(self.op_type, "y_scale", y_scale, x.shape, axis, block)
        zero = (None if y_zero_point is None else
                expand(self.op_type, "y_zero_point", y_zero_point, x.shape, axis, block))
        quotient = divide(self.op_type, x, scale, self.attr("precision"))
        return saturate(quotient, zero, dtype, bool(self.attr("saturate")))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None] * len(fwd_inputs)
