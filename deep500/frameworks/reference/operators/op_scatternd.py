"""ScatterND: a copy of ``data`` with slices data[indices[i]] replaced by (or, with
``reduction`` add/mul/max/min, combined with) updates[i].
https://onnx.ai/onnx/operators/onnx__ScatterND.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import (nd_index, scatter,
                                                                     scatter_backward)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("ScatterND")
class ScatterND(ReferenceOp):
    defaults = {"reduction": "none"}

    def forward(self, data, indices, updates):
        data = np.asarray(data)
        return scatter(data, nd_index(self.op_type, data.shape, indices), np.asarray(updates),
                       self.attr("reduction"), self.op_type)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, indices, updates = (np.asarray(x) for x in fwd_inputs)
        if not np.issubdtype(data.dtype, np.floating):
            return [None, None, None]
        dY = np.zeros_like(data) if grads[0] is None else np.asarray(grads[0])
        d_data, d_updates = scatter_backward(dY, data, nd_index(self.op_type, data.shape,
                                                                indices),
                                             updates, np.asarray(fwd_outputs[0]),
                                             self.attr("reduction"))
        return [d_data, None, d_updates.astype(updates.dtype, copy=False)]
