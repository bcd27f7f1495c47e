"""GatherND: slices of ``data`` addressed by the last dimension of ``indices`` (k-tuples
of coordinates after the first ``batch_dims`` dimensions, which data and indices share);
output shape indices.shape[:-1] + data.shape[batch_dims + k:].
https://onnx.ai/onnx/operators/onnx__GatherND.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import nd_index
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("GatherND")
class GatherND(ReferenceOp):
    defaults = {"batch_dims": 0}

    def forward(self, data, indices):
        data = np.asarray(data)
        # A copy: NumPy returns a view when the index selects everything.
        return np.array(data[nd_index(self.op_type, data.shape, indices,
                                      self.attr("batch_dims"))])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, indices = np.asarray(fwd_inputs[0]), fwd_inputs[1]
        d_data = np.zeros_like(data)
        if grads[0] is not None:
            index = nd_index(self.op_type, data.shape, indices, self.attr("batch_dims"))
            np.add.at(d_data, index, grads[0])
        return [d_data, None]
