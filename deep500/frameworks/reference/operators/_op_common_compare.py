"""Shared code of the elementwise operators without a gradient: comparisons (Less,
Greater, LessOrEqual, GreaterOrEqual), logical (And, Or, Xor, Not) and bitwise operators
(BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot), with multidirectional broadcasting.
https://onnx.ai/onnx/repo-docs/Broadcasting.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import compute_dtype
from deep500.frameworks.reference.operators._op_common_elementwise import (broadcast_shape,
                                                                            check_kind,
                                                                            check_same_dtype)
from deep500.frameworks.reference.operators.registry import ReferenceOp

NUMERIC = "fiu"
INTEGER = "iu"
BOOL = "b"


class BinaryNoGradient(ReferenceOp):
    """C = combine(A, B) for inputs of one dtype whose kind is in ``kinds`` (letters of
    ``dtype_kind``). Subclasses set ``combine`` (a NumPy ufunc) or override
    ``_compute(A, B)``."""
    kinds = NUMERIC
    combine = None

    def forward(self, A, B):
        A, B = np.asarray(A), np.asarray(B)
        check_kind(self.op_type, self.kinds, A, B)
        check_same_dtype(self.op_type, A, B)
        broadcast_shape(self.op_type, A, B)
        return np.asarray(self._compute(A, B))

    def _compute(self, A, B):
        # bfloat16 and other ml_dtypes floats compare exactly in float32.
        work = compute_dtype(A.dtype)
        return type(self).combine(A.astype(work, copy=False), B.astype(work, copy=False))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None] * len(fwd_inputs)


class UnaryNoGradient(ReferenceOp):
    """Y = combine(X) for X of a dtype whose kind is in ``kinds``."""
    kinds = BOOL
    combine = None

    def forward(self, X):
        X = np.asarray(X)
        check_kind(self.op_type, self.kinds, X)
        return np.asarray(type(self).combine(X))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]
