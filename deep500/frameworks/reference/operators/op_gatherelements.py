"""GatherElements: output[i] = data[i with its ``axis`` coordinate replaced by
indices[i]]; the output has the shape of ``indices`` (the rank of ``data``). Negative
indices count from the end. https://onnx.ai/onnx/operators/onnx__GatherElements.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import elements_index
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("GatherElements")
class GatherElements(ReferenceOp):
    defaults = {"axis": 0}

    def forward(self, data, indices):
        data = np.asarray(data)
        return data[elements_index(self.op_type, data.shape, indices, self.attr("axis"))]

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, indices = np.asarray(fwd_inputs[0]), fwd_inputs[1]
        d_data = np.zeros_like(data)
        if grads[0] is not None:
            # Scatter-add: an element gathered twice receives both gradients.
            index = elements_index(self.op_type, data.shape, indices, self.attr("axis"))
            np.add.at(d_data, index, grads[0])
        return [d_data, None]
