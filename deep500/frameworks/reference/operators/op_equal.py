"""Equal: C = (A == B) elementwise, as bool, with multidirectional broadcasting.
https://onnx.ai/onnx/operators/onnx__Equal.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import (broadcast_shape,
                                                                            check_same_dtype)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Equal")
class Equal(ReferenceOp):
    def forward(self, A, B):
        check_same_dtype(self.op_type, A, B)
        broadcast_shape(self.op_type, A, B)
        return np.asarray(np.equal(A, B))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None, None]
