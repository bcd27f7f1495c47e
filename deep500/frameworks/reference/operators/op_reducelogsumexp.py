"""ReduceLogSumExp: log(sum(exp(x))) along ``axes`` (all if empty, unless
noop_with_empty_axes), computed with the maximum subtracted first so that it neither
overflows nor underflows; -inf for an empty set.
https://onnx.ai/onnx/operators/onnx__ReduceLogSumExp.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_reduce import Reduce
from deep500.frameworks.reference.operators.registry import register


def _float(data):
    return data if np.issubdtype(data.dtype, np.floating) else data.astype(np.float64)


@register("ReduceLogSumExp")
class ReduceLogSumExp(Reduce):
    def reduce(self, data, axes):
        data = _float(data)
        peak = np.max(data, axis=axes, keepdims=True, initial=-np.inf)
        peak = np.where(np.isfinite(peak), peak, 0).astype(data.dtype)
        with np.errstate(divide="ignore"):
            return np.log(np.sum(np.exp(data - peak), axis=axes, keepdims=True)) + peak

    def reduce_backward(self, dY, data, Y, axes):
        return dY * np.exp(data - Y)   # the softmax along the axes
