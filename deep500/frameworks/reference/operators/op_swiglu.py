"""SwiGLU (opset 28): Y = Swish_alpha(A)·B = A·sigmoid(alpha·A)·B, with A (the gate) and B
(the value) of one shape and dtype, no broadcasting.
https://onnx.ai/onnx/operators/onnx__SwiGLU.html (Shazeer, GLU Variants Improve
Transformer, 2020)"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import (compute_dtype,
                                                                           sigmoid)
from deep500.frameworks.reference.operators._op_common_elementwise import (check_kind,
                                                                           check_same_dtype)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("SwiGLU")
class SwiGLU(ReferenceOp):
    defaults = {"alpha": 1.0}

    def _check(self, A, B):
        check_kind(self.op_type, "f", A, B)
        check_same_dtype(self.op_type, A, B)
        if A.shape != B.shape:
            raise ShapeError(f"{self.op_type}: A {A.shape} and B {B.shape} must have one "
                             f"shape (SwiGLU does not broadcast); split the projection "
                             f"into equal halves first")
        return compute_dtype(A.dtype)

    def forward(self, A, B):
        A, B = np.asarray(A), np.asarray(B)
        work = self._check(A, B)
        a, b = A.astype(work, copy=False), B.astype(work, copy=False)
        with np.errstate(all="ignore"):
            Y = a * sigmoid(work.type(self.attr("alpha")) * a) * b
        return Y.astype(A.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        A, B = np.asarray(fwd_inputs[0]), np.asarray(fwd_inputs[1])
        if grads[0] is None:
            return [np.zeros_like(A), np.zeros_like(B)]
        work = self._check(A, B)
        a, b = A.astype(work, copy=False), B.astype(work, copy=False)
        dY = np.asarray(grads[0]).astype(work, copy=False)
        alpha = work.type(self.attr("alpha"))
        with np.errstate(all="ignore"):
            s = sigmoid(alpha * a)
            dA = dY * b * (s + alpha * a * s * (work.type(1) - s))
            dB = dY * a * s
        return [dA.astype(A.dtype, copy=False), dB.astype(B.dtype, copy=False)]
