"""ReduceProd: product of the elements along ``axes`` (all if empty, unless
noop_with_empty_axes); 1 for an empty set.
https://onnx.ai/onnx/operators/onnx__ReduceProd.html

The gradient of each element is the product of the others, computed exactly also where
some elements are zero (not as Y / x).
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import Reduce
from deep500.frameworks.reference.operators.registry import register


@register("ReduceProd")
class ReduceProd(Reduce):
    def reduce(self, data, axes):
        return np.prod(data, axis=axes, keepdims=True)

    def reduce_backward(self, dY, data, Y, axes):
        zero = data == 0
        safe = np.where(zero, 1, data)
        nonzero_product = np.prod(safe, axis=axes, keepdims=True)
        zeros = np.sum(zero, axis=axes, keepdims=True)
        # No zero: Y / x. One zero: that element gets the product of the others, the rest 0.
        others = np.where(zeros == 0, nonzero_product / safe,
                          np.where(zero & (zeros == 1), nonzero_product, 0))
        return dY * others
