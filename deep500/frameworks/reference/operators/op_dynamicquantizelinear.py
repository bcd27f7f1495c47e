"""DynamicQuantizeLinear: float32 x to uint8 with a scale and zero point computed from x
(opset 11). https://onnx.ai/onnx/operators/onnx__DynamicQuantizeLinear.html

``y_scale = (max(0, max(x)) - min(0, min(x))) / 255`` (float32), ``y_zero_point =
round(saturate(0 - min(0, min(x)) / y_scale))``, ``y = saturate(round(x / y_scale) +
y_zero_point)``, rounding half to even and saturating to [0, 255]. Where the range is
empty (x all zero, or empty) the spec divides by zero; here, as in ONNX's own evaluator,
the range counts as 1 (y_scale = 1/255).

Gradients: none (the outputs are step functions of x, or statistics used only through
them); backward returns None.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_quantize import saturate
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("DynamicQuantizeLinear")
class DynamicQuantizeLinear(ReferenceOp):
    defaults = {}

    def forward(self, x):
        x = np.asarray(x)
        if x.dtype != np.float32:
            raise ShapeError(f"{self.op_type}: x must be float32, got {x.dtype}")
        high = np.float32(max(0.0, x.max())) if x.size else np.float32(0)
        low = np.float32(min(0.0, x.min())) if x.size else np.float32(0)
        span = np.float32(1) if high == low else high - low
        scale = np.float32(span / np.float32(255))
        zero = np.rint(np.clip(np.float32(0) - low / scale, 0, 255))
        y = saturate(x / scale, zero, np.dtype(np.uint8))
        return y, np.array(scale, np.float32), np.array(zero, np.uint8)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]
