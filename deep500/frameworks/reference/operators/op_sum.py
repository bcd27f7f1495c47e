"""Sum: elementwise sum of any number of inputs with multidirectional broadcasting; each
input's gradient is the output's, summed over the axes it was broadcast along.
https://onnx.ai/onnx/operators/onnx__Sum.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_elementwise import broadcast_sum
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Sum")
class Sum(ReferenceOp):
    def forward(self, *inputs):
        return broadcast_sum(self.op_type, inputs, inputs[0].dtype if inputs else None)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if grads[0] is None:
            return [np.zeros_like(x) for x in fwd_inputs]
        return [unbroadcast(grads[0], x.shape).astype(x.dtype, copy=True) for x in fwd_inputs]
