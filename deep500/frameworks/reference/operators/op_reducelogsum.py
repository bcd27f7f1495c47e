"""ReduceLogSum: natural logarithm of the sum along ``axes`` (all if empty, unless
noop_with_empty_axes); log of an empty sum is -inf.
https://onnx.ai/onnx/operators/onnx__ReduceLogSum.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import Reduce
from deep500.frameworks.reference.operators.registry import register


@register("ReduceLogSum")
class ReduceLogSum(Reduce):
    def reduce(self, data, axes):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(np.sum(data, axis=axes, keepdims=True))

    def reduce_backward(self, dY, data, Y, axes):
        return dY / np.sum(data, axis=axes, keepdims=True)
