"""ReduceMax (opset 18): maximum of the elements along the ``axes`` input (all if empty,
unless noop_with_empty_axes). https://onnx.ai/onnx/operators/onnx__ReduceMax.html

The gradient is shared equally by the elements that tie for the maximum (as PyTorch's
``amax``).
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import Reduce
from deep500.frameworks.reference.operators.registry import register


@register("ReduceMax")
class ReduceMax(Reduce):
    def reduce(self, data, axes):
        return np.max(data, axis=axes, keepdims=True)

    def reduce_backward(self, dY, data, Y, axes):
        winners = data == Y
        ties = winners.sum(axis=axes, keepdims=True).astype(data.dtype)
        return dY * winners / ties
