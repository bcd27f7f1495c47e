"""ReduceL1: sum of the absolute values along ``axes`` (all if empty, unless
noop_with_empty_axes). https://onnx.ai/onnx/operators/onnx__ReduceL1.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import SumOfTerms
from deep500.frameworks.reference.operators.registry import register


@register("ReduceL1")
class ReduceL1(SumOfTerms):
    term = staticmethod(np.abs)
    term_derivative = staticmethod(np.sign)   # the subgradient 0 at 0, as PyTorch
