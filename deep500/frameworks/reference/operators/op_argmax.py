"""ArgMax: int64 indices of the largest elements along ``axis`` (ties: the first, or the
last with select_last_index). https://onnx.ai/onnx/operators/onnx__ArgMax.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_argreduce import ArgReduce
from deep500.frameworks.reference.operators.registry import register


@register("ArgMax")
class ArgMax(ArgReduce):
    find = staticmethod(np.argmax)
