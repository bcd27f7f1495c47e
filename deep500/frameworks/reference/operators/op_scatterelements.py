"""ScatterElements: a copy of ``data`` where the element at position i of ``indices``,
with its ``axis`` coordinate replaced by indices[i], is replaced by (or, with
``reduction`` add/mul/max/min, combined with) updates[i].
https://onnx.ai/onnx/operators/onnx__ScatterElements.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import (elements_index,
                                                                     scatter,
                                                                     scatter_backward)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("ScatterElements")
class ScatterElements(ReferenceOp):
    defaults = {"axis": 0, "reduction": "none"}

    def _index(self, data, indices, updates):
        if np.shape(indices) != np.shape(updates):
            raise ShapeError(f"{self.op_type}: indices {np.shape(indices)} and updates "
                             f"{np.shape(updates)} must have the same shape")
        return elements_index(self.op_type, data.shape, indices, self.attr("axis"))

    def forward(self, data, indices, updates):
        data, updates = np.asarray(data), np.asarray(updates)
        return scatter(data, self._index(data, indices, updates), updates,
                       self.attr("reduction"), self.op_type)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, indices, updates = (np.asarray(x) for x in fwd_inputs)
        if not np.issubdtype(data.dtype, np.floating):
            return [None, None, None]
        dY = np.zeros_like(data) if grads[0] is None else np.asarray(grads[0])
        d_data, d_updates = scatter_backward(dY, data, self._index(data, indices, updates),
                                             updates, np.asarray(fwd_outputs[0]),
                                             self.attr("reduction"))
        return [d_data, None, d_updates.astype(updates.dtype, copy=False)]
