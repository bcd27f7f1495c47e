"""Mean: elementwise mean of any number of inputs with multidirectional broadcasting
(summed in float32 for the 16-bit extension floats); each input's gradient is the
output's divided by the number of inputs, summed over the axes it was broadcast along.
https://onnx.ai/onnx/operators/onnx__Mean.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import compute_dtype
from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_elementwise import (broadcast_sum,
                                                                            check_kind)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Mean")
class Mean(ReferenceOp):
    def forward(self, *inputs):
        inputs = [np.asarray(x) for x in inputs]
        check_kind(self.op_type, "f", *inputs)
        dtype = inputs[0].dtype if inputs else np.dtype(np.float32)
        work = compute_dtype(dtype)
        total = broadcast_sum(self.op_type, inputs, work)
        return (total / work.type(len(inputs))).astype(dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if grads[0] is None:
            return [np.zeros_like(x) for x in fwd_inputs]
        work = compute_dtype(np.asarray(fwd_inputs[0]).dtype)
        share = np.asarray(grads[0]).astype(work) / work.type(len(fwd_inputs))
        return [unbroadcast(share, np.shape(x)).astype(np.asarray(x).dtype, copy=True)
                for x in fwd_inputs]
