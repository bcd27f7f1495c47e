"""Shared code of Softmax, LogSoftmax and SoftmaxCrossEntropyLoss: the axis check and
numerically stable (max-subtracted) softmax and log-softmax along one axis.
https://onnx.ai/onnx/operators/onnx__Softmax.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_rows import (as_rows, row_maxima,
                                                                     row_sums)
from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError


def normalize_axis(op_type: str, axis: int, ndim: int) -> int:
    """``axis`` in [0, ndim), accepting negative axes; a ShapeError if out of range."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op_type}: axis {axis} is out of range for an input of rank "
                         f"{ndim} (valid: {-ndim} to {ndim - 1})")
    return axis % ndim


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    if axis == x.ndim - 1 and x.size and x.dtype in (np.float32, np.float64):
        return _softmax_last_axis(x)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _softmax_last_axis(x: np.ndarray) -> np.ndarray:
    """softmax along the last axis in one fresh array, with the row reductions of
    ``_op_common_rows``.

    Where no row can overflow (every exp(x) and its row's sum finite: max(x) below
    log(largest float) - log(n)), the spec's exp(x)/Σexp(x) directly, without the per-row
    max that NumPy finds slowly along a short last axis (half the time of the operator);
    it also skips the rounding of x - max. Rows whose sum is below 1 (their largest
    element below -log n, e.g. fully masked attention rows) are redone max-subtracted, so
    exp underflows only where the max-subtracted form's output is below ~1e-36 (float32)
    too."""
    rows = as_rows(x)
    n = rows.shape[1]
    finfo = np.finfo(x.dtype)
    if np.max(rows) < np.log(finfo.max) - np.log(n) - 1:   # False for NaN: the other path
        e = np.exp(rows)
        sums = row_sums(e)
        low = sums < 1
        if low.any():
            e[low] = _softmax_shifted(rows[low])
            sums[low] = 1
        np.divide(e, sums[:, np.newaxis], out=e)
        return e.reshape(x.shape)
    return _softmax_shifted(rows).reshape(x.shape)


def _softmax_shifted(rows: np.ndarray) -> np.ndarray:
    """Max-subtracted softmax of each row of a 2-D array."""
    e = np.subtract(rows, row_maxima(rows)[:, np.newaxis])
    np.exp(e, out=e)
    return np.divide(e, row_sums(e)[:, np.newaxis], out=e)


def softmax_backward(dy: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    """Gradient w.r.t. x of y = softmax(x) for upstream ``dy``."""
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


def log_softmax_backward(dy: np.ndarray, log_y: np.ndarray, axis: int) -> np.ndarray:
    """Gradient w.r.t. x of log_y = log_softmax(x) for upstream ``dy``."""
    return dy - np.exp(log_y) * np.sum(dy, axis=axis, keepdims=True)


class AlongAxis(ReferenceOp):
    """Softmax and LogSoftmax: Y = ``function(X, axis)`` along the ``axis`` attribute,
    whose gradient ``gradient(dY, Y, axis)`` is computed from the output."""
    defaults = {"axis": -1}
    function = None
    gradient = None

    def _axis(self, X) -> int:
        return normalize_axis(self.op_type, self.attr("axis"), X.ndim)

    def forward(self, X):
        return type(self).function(X, self._axis(X))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        if grads[0] is None:
            return [np.zeros_like(X)]
        return [type(self).gradient(grads[0], fwd_outputs[0], self._axis(X))]
