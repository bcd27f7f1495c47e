"""CumSum: cumulative sum along the ``axis`` input, optionally exclusive and/or reversed.
https://onnx.ai/onnx/operators/onnx__CumSum.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_cumulative import (Cumulative,
                                                                          reverse_cumsum)
from deep500.frameworks.reference.operators.registry import register


@register("CumSum")
class CumSum(Cumulative):
    ufunc = np.add

    def scan_backward(self, dY, x, Y, axis):
        return reverse_cumsum(dY, axis)   # dX_j = sum over i >= j of dY_i
