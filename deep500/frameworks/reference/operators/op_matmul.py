"""MatMul: matrix product with numpy.matmul semantics (1-D operands promoted, batch
dimensions broadcast). https://onnx.ai/onnx/operators/onnx__MatMul.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("MatMul")
class MatMul(ReferenceOp):
    defaults = {}

    def _check(self, A, B):
        if A.ndim == 0 or B.ndim == 0:
            raise ShapeError(f"{self.op_type}: inputs must have at least one dimension, got "
                             f"shapes {A.shape} and {B.shape}")
        if A.dtype != B.dtype:
            raise ShapeError(f"{self.op_type}: inputs must share one dtype, got {A.dtype} and "
                             f"{B.dtype}")
        if A.shape[-1] != B.shape[-2 if B.ndim > 1 else 0]:
            raise ShapeError(f"{self.op_type}: inner dimensions differ: A {A.shape} has "
                             f"{A.shape[-1]} columns, B {B.shape} has "
                             f"{B.shape[-2 if B.ndim > 1 else 0]} rows")
        if A.ndim < 3 or B.ndim < 3 or A.shape[:-2] == B.shape[:-2]:
            return   # the batch dimensions broadcast (np.broadcast_shapes costs ~1.5 µs)
        try:
            np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        except ValueError:
            raise ShapeError(f"{self.op_type}: batch dimensions {A.shape[:-2]} and "
                             f"{B.shape[:-2]} do not broadcast") from None

    def forward(self, A, B):
        A, B = np.asarray(A), np.asarray(B)
        self._check(A, B)
        return np.asarray(np.matmul(A, B))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        A, B = (np.asarray(x) for x in fwd_inputs)
        # Work on the 1-D-promoted operands, whose product keeps both matrix axes.
        a = A if A.ndim > 1 else A[np.newaxis, :]
        b = B if B.ndim > 1 else B[:, np.newaxis]
        dY = np.asarray(grads[0]).reshape(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
                                          + (a.shape[-2], b.shape[-1]))
        da = dY @ np.swapaxes(b, -1, -2)
        db = np.swapaxes(a, -1, -2) @ dY
        return [unbroadcast(da, a.shape).reshape(A.shape).astype(A.dtype, copy=False),
                unbroadcast(db, b.shape).reshape(B.shape).astype(B.dtype, copy=False)]
