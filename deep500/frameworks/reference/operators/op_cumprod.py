"""CumProd: cumulative product along the ``axis`` input, optionally exclusive and/or
reversed. https://onnx.ai/onnx/operators/onnx__CumProd.html

The gradient is exact where inputs are zero: with z the first zero of a lane,
dX_j = sum_{j<=i<z} dY_i Y_i / x_j before it, dX_z = sum_{i>=z} dY_i Y'_i at it (Y' the
products with x_z replaced by 1), and 0 after it.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_cumulative import (Cumulative,
                                                                          reverse_cumsum)
from deep500.frameworks.reference.operators.registry import register


@register("CumProd")
class CumProd(Cumulative):
    ufunc = np.multiply

    def scan_backward(self, dY, x, Y, axis):
        zero = x == 0
        zeros_before = np.cumsum(zero, axis=axis) - zero     # zeros strictly before j
        first_zero = zero & (zeros_before == 0)
        before = ~zero & (zeros_before == 0)
        safe = np.where(zero, 1, x)
        d_before = reverse_cumsum(dY * Y, axis) / safe       # Y_i = 0 from the first zero on
        Y_without = np.cumprod(np.where(first_zero, 1, x), axis=axis)
        d_first = reverse_cumsum(dY * Y_without, axis)
        return np.where(before, d_before, np.where(first_zero, d_first, 0))
