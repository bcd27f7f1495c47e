"""ReduceMin (opset 18): minimum of the elements along the ``axes`` input (all if empty,
unless noop_with_empty_axes); the minimum of no elements is the highest value of the type
(+inf for floats). https://onnx.ai/onnx/operators/onnx__ReduceMin.html

The gradient is shared equally by the elements that tie for the minimum (as ReduceMax).
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import ExtremeReduce
from deep500.frameworks.reference.operators.registry import register


@register("ReduceMin")
class ReduceMin(ExtremeReduce):
    pick = np.min
    lowest_start = False
