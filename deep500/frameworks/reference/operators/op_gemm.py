"""Gemm: Y = alpha·A'·B' + beta·C, with A' = Aᵀ if transA and B' = Bᵀ if transB, and C
broadcast unidirectionally to (M, N). https://onnx.ai/onnx/operators/onnx__Gemm.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Gemm")
class Gemm(ReferenceOp):
    defaults = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}

    def _operands(self, A, B):
        return (A.T if self.attr("transA") else A), (B.T if self.attr("transB") else B)

    def _check(self, A, B, C):
        if A.ndim != 2 or B.ndim != 2:
            raise ShapeError(f"{self.op_type}: A and B must be matrices, got shapes {A.shape} "
                             f"and {B.shape}")
        a, b = self._operands(A, B)
        if a.shape[1] != b.shape[0]:
            raise ShapeError(f"{self.op_type}: inner dimensions differ: A' is {a.shape}, B' is "
                             f"{b.shape} (transA={self.attr('transA')}, "
                             f"transB={self.attr('transB')})")
        if C is not None:
            shape = (a.shape[0], b.shape[1])
            try:
                broadcastable = np.broadcast_shapes(np.shape(C), shape) == shape
            except ValueError:
                broadcastable = False
            if not broadcastable:
                raise ShapeError(f"{self.op_type}: C of shape {np.shape(C)} does not broadcast "
                                 f"to the output shape {shape}")

    def forward(self, A, B, C=None):
        self._check(A, B, C)
        a, b = self._operands(A, B)
        alpha, beta = self.attr("alpha"), self.attr("beta")
        Y = a @ b
        if alpha != 1.0:
            Y *= Y.dtype.type(alpha)
        if C is not None and beta != 0.0:
            Y += Y.dtype.type(beta) * C if beta != 1.0 else C
        return Y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        A, B = fwd_inputs[0], fwd_inputs[1]
        C = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        dY = grads[0]
        alpha, beta = self.attr("alpha"), self.attr("beta")
        a, b = self._operands(A, B)
        # The gradient of A' = op(A) is dY @ b.T; for a transposed operand the product
        # is formed in A's own layout (b @ dY.T = (dY @ b.T).T), so gradients come out
        # C-contiguous rather than as transposed views that are slow to copy later.
        alpha_a, alpha_b = A.dtype.type(alpha), B.dtype.type(alpha)
        dA = (b @ dY.T if self.attr("transA") else dY @ b.T) * alpha_a
        dB = (dY.T @ a if self.attr("transB") else a.T @ dY) * alpha_b
        result = [dA, dB]
        if len(fwd_inputs) > 2:
            result.append(None if C is None else unbroadcast(dY * C.dtype.type(beta), C.shape))
        return result
