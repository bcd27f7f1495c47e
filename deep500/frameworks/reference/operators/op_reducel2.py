"""ReduceL2: square root of the sum of squares along ``axes`` (all if empty, unless
noop_with_empty_axes). https://onnx.ai/onnx/operators/onnx__ReduceL2.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import Reduce
from deep500.frameworks.reference.operators.registry import register


@register("ReduceL2")
class ReduceL2(Reduce):
    def reduce(self, data, axes):
        return np.sqrt(np.sum(np.square(data), axis=axes, keepdims=True))

    def reduce_backward(self, dY, data, Y, axes):
        # x / ||x||; where the norm is 0 the subgradient 0 (as PyTorch).
        return dY * np.where(Y == 0, 0, data / np.where(Y == 0, 1, Y))
