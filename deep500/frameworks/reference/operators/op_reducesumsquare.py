"""ReduceSumSquare: sum of the squares along ``axes`` (all if empty, unless
noop_with_empty_axes); the gradient is 2·x·dY.
https://onnx.ai/onnx/operators/onnx__ReduceSumSquare.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import SumOfTerms
from deep500.frameworks.reference.operators.registry import register


@register("ReduceSumSquare")
class ReduceSumSquare(SumOfTerms):
    term = staticmethod(np.square)

    @staticmethod
    def term_derivative(x):
        return 2 * x
