"""ReduceMin (opset 18): minimum of the elements along the ``axes`` input (all if empty,
unless noop_with_empty_axes); the minimum of no elements is the highest value of the type
(+inf for floats). https://onnx.ai/onnx/operators/onnx__ReduceMin.html

The gradient is shared equally by the elements that tie for the minimum (as ReduceMax).
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import Reduce
from deep500.frameworks.reference.operators.registry import register


def _highest(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return dtype.type(np.inf)   # floats, including extension types such as bfloat16


@register("ReduceMin")
class ReduceMin(Reduce):
    def reduce(self, data, axes):
        return np.min(data, axis=axes, keepdims=True, initial=_highest(data.dtype))

    def reduce_backward(self, dY, data, Y, axes):
        winners = data == Y
        ties = winners.sum(axis=axes, keepdims=True).astype(data.dtype)
        return dY * winners / ties
