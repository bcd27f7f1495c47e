"""Mean: elementwise mean of any number of inputs with multidirectional broadcasting.
https://onnx.ai/onnx/operators/onnx__Mean.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import compute_dtype
from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_elementwise import (broadcast_shape,
                                                                            check_kind,
                                                                            check_same_dtype)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Mean")
class Mean(ReferenceOp):
    def forward(self, *inputs):
        if not inputs:
            raise ShapeError("Mean: needs at least one input")
        inputs = [np.asarray(x) for x in inputs]
        check_kind(self.op_type, "f", *inputs)
        check_same_dtype(self.op_type, *inputs)
        shape = broadcast_shape(self.op_type, *inputs)
        dtype = inputs[0].dtype
        work = compute_dtype(dtype)
        total = np.zeros(shape, dtype=work)
        for x in inputs:
            total += x.astype(work, copy=False)
        return (total / work.type(len(inputs))).astype(dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if grads[0] is None:
            return [np.zeros_like(x) for x in fwd_inputs]
        work = compute_dtype(np.asarray(fwd_inputs[0]).dtype)
        share = np.asarray(grads[0]).astype(work) / work.type(len(fwd_inputs))
        return [unbroadcast(share, np.shape(x)).astype(np.asarray(x).dtype, copy=True)
                for x in fwd_inputs]
