"""ArgMin: int64 indices of the smallest elements along ``axis`` (ties: the first, or the
last with select_last_index). https://onnx.ai/onnx/operators/onnx__ArgMin.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_argreduce import ArgReduce
from deep500.frameworks.reference.operators.registry import register


@register("ArgMin")
class ArgMin(ArgReduce):
    find = staticmethod(np.argmin)
