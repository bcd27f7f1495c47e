"""ReduceMax (opset 18): maximum of the elements along the ``axes`` input (all if empty,
unless noop_with_empty_axes); the maximum of no elements is the lowest value of the type
(-inf for floats). https://onnx.ai/onnx/operators/onnx__ReduceMax.html

The gradient is shared equally by the elements that tie for the maximum (as PyTorch's
``amax``).
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import ExtremeReduce
from deep500.frameworks.reference.operators.registry import register


@register("ReduceMax")
class ReduceMax(ExtremeReduce):
    pick = np.max
    lowest_start = True
