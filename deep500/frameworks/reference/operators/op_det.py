"""Det: the determinant of each square matrix in the last two dimensions of the input.
https://onnx.ai/onnx/operators/onnx__Det.html

The gradient is the transposed adjugate, d det(A)/dA = adj(A)^T, computed from the SVD
A = U S V^T as adj(A) = det(U) det(V) · V adj(S) U^T with adj(S)_ii = prod_{j != i} s_j,
which stays exact for singular matrices (where det(A) A^-T does not exist).
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


def _products_of_others(s: np.ndarray) -> np.ndarray:
    """prod_{j != i} s_j along the last axis, without division."""
    ones = np.ones_like(s[..., :1])
    before = np.cumprod(np.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)
    after = np.flip(np.cumprod(np.concatenate([ones, np.flip(s, -1)[..., :-1]], axis=-1),
                               axis=-1), -1)
    return before * after


@register("Det")
class Det(ReferenceOp):
    def _check(self, X):
        X = np.asarray(X)
        if X.ndim < 2 or X.shape[-1] != X.shape[-2]:
            raise ShapeError(f"{self.op_type}: the input must be [..., M, M] (square "
                             f"matrices), got shape {X.shape}")
        return X

    def forward(self, X):
        X = self._check(X)
        return np.asarray(np.linalg.det(X)).astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X = self._check(fwd_inputs[0])
        if grads[0] is None:
            return [np.zeros_like(X)]
        if X.shape[-1] == 0:
            return [np.zeros_like(X)]
        U, s, Vt = np.linalg.svd(X)
        sign = np.linalg.det(U) * np.linalg.det(Vt)
        adj_s = _products_of_others(s)
        # adj(A) = sign · V diag(adj_s) U^T, so adj(A)^T = sign · U diag(adj_s) V^T.
        adjugate_t = sign[..., None, None] * (U * adj_s[..., None, :]) @ Vt
        dY = np.asarray(grads[0])[..., None, None]
        return [(dY * adjugate_t).astype(X.dtype, copy=False)]
