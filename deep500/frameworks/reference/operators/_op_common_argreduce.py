"""Shared by ArgMax and ArgMin: the index (int64) of the extreme element along ``axis``,
the first occurrence among ties, or the last with select_last_index=1.
https://onnx.ai/onnx/operators/onnx__ArgMax.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import normalize_axis
from deep500.frameworks.reference.operators.registry import ReferenceOp


class ArgReduce(ReferenceOp):
    """Subclasses set ``find`` (np.argmax or np.argmin)."""
    defaults = {"axis": 0, "keepdims": 1, "select_last_index": 0}
    find = None

    def forward(self, data):
        data = np.asarray(data)
        rank = max(data.ndim, 1)
        axis = normalize_axis(self.op_type, self.attr("axis"), rank)
        data = data.reshape(data.shape or (1,))
        if self.attr("select_last_index"):
            # The first occurrence in the reversed axis is the last one in the original.
            index = data.shape[axis] - 1 - type(self).find(np.flip(data, axis), axis=axis)
        else:
            index = type(self).find(data, axis=axis)
        index = np.asarray(index, np.int64)
        return np.expand_dims(index, axis) if self.attr("keepdims") else index

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]   # integer output: no gradient flows
