"""Shared code of the one-input elementwise operators of the float family (activations,
trigonometric and hyperbolic functions, rounding) and of those that also take integers
(Abs, Sign, Shrink). https://onnx.ai/onnx/operators/ (each operator's page)

bfloat16 inputs (an ml_dtypes type on which NumPy has few ufuncs) are computed in float32
and rounded back, which is what the type can hold anyway.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import (
    UnaryElementwise, check_kind, dtype_kind, is_floating)


def compute_dtype(dtype) -> np.dtype:
    """The dtype to compute in for inputs of ``dtype``: float32 for the ml_dtypes floats,
    ``dtype`` itself otherwise."""
    dtype = np.dtype(dtype)
    if is_floating(dtype) and not np.issubdtype(dtype, np.floating):
        return np.dtype(np.float32)
    return dtype


def sigmoid(X: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-X)) without overflow: exp(-|X|) <= 1 for either sign."""
    e = np.exp(-np.abs(X))
    one = X.dtype.type(1)
    return np.where(X >= 0, one / (one + e), e / (one + e))


def softplus(X: np.ndarray) -> np.ndarray:
    """ln(1 + exp(X)) without overflow."""
    return np.logaddexp(X.dtype.type(0), X)


class Unary(UnaryElementwise):
    """Y = f(X) with Y of X's dtype. ``kinds`` lists the dtype kinds the operator takes
    ('f' floating, 'i' signed, 'u' unsigned); integer inputs have no gradient.

    Subclasses implement ``_forward(X)`` and ``_backward(dY, X, Y)`` on arrays of the
    compute dtype (see :func:`compute_dtype`), or, for Y = f(X) with f one NumPy
    function, name ``function`` and ``derivative`` (f'); ``scalar(name, X)`` is attribute
    ``name`` in X's dtype.
    """
    kinds = "f"
    function = None
    derivative = None

    def _forward(self, X):
        return self.function(X)

    def _backward(self, dY, X, Y):
        return dY * self.derivative(X)

    def scalar(self, name: str, X: np.ndarray):
        return X.dtype.type(self.attr(name))

    def forward(self, X):
        X = np.asarray(X)
        check_kind(self.op_type, self.kinds, X)
        work = compute_dtype(X.dtype)
        with np.errstate(all="ignore"):   # NaN and ±inf are results like any other
            Y = np.asarray(self._forward(X.astype(work, copy=False)))
        return Y.astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,), (Y,) = fwd_inputs, fwd_outputs[:1]
        X = np.asarray(X)
        if not is_floating(X.dtype):
            return [None]
        if grads[0] is None:
            return [np.zeros_like(X)]
        work = compute_dtype(X.dtype)
        with np.errstate(all="ignore"):
            dX = self._backward(np.asarray(grads[0]).astype(work, copy=False),
                                X.astype(work, copy=False),
                                np.asarray(Y).astype(work, copy=False))
        return [np.asarray(dX).astype(X.dtype, copy=False)]


class PiecewiseConstant(Unary):
    """An operator whose derivative is zero wherever it exists (Floor, Ceil, Round,
    Sign): the gradient is zero."""

    def _backward(self, dY, X, Y):
        return np.zeros_like(X)


def is_integer(X) -> bool:
    return dtype_kind(np.asarray(X).dtype) in "iu"
