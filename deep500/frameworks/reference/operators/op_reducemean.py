"""ReduceMean: mean of the elements along ``axes`` (all if empty, unless
noop_with_empty_axes). https://onnx.ai/onnx/operators/onnx__ReduceMean.html"""
import math

import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import Reduce
from deep500.frameworks.reference.operators.registry import register


@register("ReduceMean")
class ReduceMean(Reduce):
    def reduce(self, data, axes):
        return np.mean(data, axis=axes, keepdims=True)

    def reduce_backward(self, dY, data, Y, axes):
        count = math.prod(data.shape[a] for a in axes)
        return dY / data.dtype.type(count)
