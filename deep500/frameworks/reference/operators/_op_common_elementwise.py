"""Shared code of the elementwise operators: activations (one input, one output) and the
binary arithmetic operators Add, Sub, Mul, Div with multidirectional broadcasting.
https://onnx.ai/onnx/repo-docs/Broadcasting.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.cast import dtype_kind, is_floating  # noqa: F401 - re-exported


def broadcast_shape(op_type: str, *arrays) -> tuple:
    """The shape that ``arrays`` broadcast to, or a ShapeError naming ``op_type``."""
    try:
        if 0 < len(arrays) <= 32:
            # the same shape as np.broadcast_shapes in a quarter of the time (every binary
            # operator calls this); np.broadcast takes at most 64 arrays
            return np.broadcast(*arrays).shape
        return np.broadcast_shapes(*(np.shape(a) for a in arrays))
    except ValueError:
        shapes = ", ".join(str(np.shape(a)) for a in arrays)
        raise ShapeError(f"{op_type}: input shapes {shapes} do not broadcast (NumPy-style "
                         f"broadcasting needs each pair of trailing dimensions to be equal "
                         f"or 1)") from None


_KIND_NAMES = {"f": "floating-point", "i": "signed integer", "u": "unsigned integer",
               "b": "bool", "U": "string", "S": "string", "O": "string"}


def check_kind(op_type: str, kinds: str, *arrays) -> None:
    """A ShapeError naming ``op_type`` unless every array's dtype is of one of ``kinds``
    (letters of :func:`dtype_kind`)."""
    for array in arrays:
        dtype = np.asarray(array).dtype
        if dtype_kind(dtype) not in kinds:
            allowed = " or ".join(dict.fromkeys(_KIND_NAMES.get(k, k) for k in kinds))
            raise ShapeError(f"{op_type}: inputs of dtype {dtype} are not allowed; the "
                             f"operator takes {allowed} tensors (see "
                             f"https://onnx.ai/onnx/operators/onnx__{op_type}.html)")


def check_same_dtype(op_type: str, *arrays) -> None:
    dtypes = {np.asarray(a).dtype for a in arrays}
    if len(dtypes) > 1:
        raise ShapeError(f"{op_type}: inputs have different dtypes "
                         f"{sorted(str(d) for d in dtypes)}; ONNX requires one type for all "
                         f"inputs")


def broadcast_sum(op_type: str, inputs, dtype) -> np.ndarray:
    """Σ inputs (of one dtype, broadcast together), accumulated in ``dtype``: Sum and
    Mean."""
    if not inputs:
        raise ShapeError(f"{op_type}: needs at least one input")
    check_same_dtype(op_type, *inputs)
    total = np.zeros(broadcast_shape(op_type, *inputs), dtype=dtype)
    for x in inputs:
        total += np.asarray(x).astype(dtype, copy=False)
    return total


class UnaryElementwise(ReferenceOp):
    """Y = f(X). Subclasses implement ``_forward(X)`` and ``_backward(dY, X, Y)``."""

    def forward(self, X):
        return np.asarray(self._forward(X))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,), (Y,) = fwd_inputs, fwd_outputs[:1]
        if grads[0] is None:
            return [np.zeros_like(X)]
        return [np.asarray(self._backward(grads[0], X, Y), dtype=X.dtype)]

    def _forward(self, X):
        raise NotImplementedError

    def _backward(self, dY, X, Y):
        raise NotImplementedError


class BinaryElementwise(ReferenceOp):
    """C = f(A, B) with broadcasting. Subclasses implement ``_backward(dC, A, B, C)``,
    which returns the gradients at the broadcast shape, and name ``float_ufunc``, the
    ufunc ``_forward`` is on floating-point inputs (used by ``forward_inplace``; by
    default ``_forward`` is that ufunc on every type), or implement ``_forward(A, B)``."""
    float_ufunc = None

    def forward(self, A, B):
        check_same_dtype(self.op_type, A, B)
        broadcast_shape(self.op_type, A, B)
        # np.asarray: NumPy returns scalars, not arrays, for 0-d operands.
        return np.asarray(self._forward(A, B))

    def forward_inplace(self, A, B):
        """``forward`` writing into A, which the caller no longer needs (see
        ``ReferenceGraphExecutor``: it passes only arrays nothing else refers to), where C
        has A's shape and dtype, a float type; else ``forward``. Saves a fresh output per
        call (a bias Add, GELU's Mul and Add chain)."""
        ufunc = self.float_ufunc
        if (ufunc is None or A.dtype not in (np.float32, np.float64)
                or getattr(B, "dtype", None) != A.dtype
                or broadcast_shape(self.op_type, A, B) != A.shape):
            return self.forward(A, B)
        return ufunc(A, B, out=A)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        A, B = fwd_inputs
        if grads[0] is None:
            return [np.zeros_like(A), np.zeros_like(B)]
        dC = grads[0]
        result = []
        for x, dx in zip((A, B), self._backward(dC, A, B, fwd_outputs[0])):
            dx = unbroadcast(np.asarray(dx, dtype=x.dtype), x.shape)
            # Never hand back the caller's upstream array (or one array twice): a graph
            # executor may accumulate gradients in place.
            result.append(dx.copy() if dx is dC or any(dx is r for r in result) else dx)
        return result

    def _forward(self, A, B):
        return self.float_ufunc(A, B)

    def _backward(self, dC, A, B, C):
        raise NotImplementedError
