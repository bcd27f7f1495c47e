"""ReduceSumSquare: sum of the squares along ``axes`` (all if empty, unless
noop_with_empty_axes). https://onnx.ai/onnx/operators/onnx__ReduceSumSquare.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import Reduce
from deep500.frameworks.reference.operators.registry import register


@register("ReduceSumSquare")
class ReduceSumSquare(Reduce):
    def reduce(self, data, axes):
        return np.sum(np.square(data), axis=axes, keepdims=True)

    def reduce_backward(self, dY, data, Y, axes):
        return 2 * dY * data
