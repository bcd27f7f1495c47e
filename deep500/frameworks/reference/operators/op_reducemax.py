"""ReduceMax (opset 18): maximum of the elements along the ``axes`` input (all if empty,
unless noop_with_empty_axes); the maximum of no elements is the lowest value of the type
(-inf for floats). https://onnx.ai/onnx/operators/onnx__ReduceMax.html

The gradient is shared equally by the elements that tie for the maximum (as PyTorch's
``amax``).
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import Reduce
from deep500.frameworks.reference.operators.registry import register


def _lowest(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return dtype.type(-np.inf)   # floats, including extension types such as bfloat16


@register("ReduceMax")
class ReduceMax(Reduce):
    def reduce(self, data, axes):
        return np.max(data, axis=axes, keepdims=True, initial=_lowest(data.dtype))

    def reduce_backward(self, dY, data, Y, axes):
        winners = data == Y
        ties = winners.sum(axis=axes, keepdims=True).astype(data.dtype)
        return dY * winners / ties
