"""Shared code of Softmax, LogSoftmax and SoftmaxCrossEntropyLoss: the axis check and
numerically stable (max-subtracted) softmax and log-softmax along one axis.
https://onnx.ai/onnx/operators/onnx__Softmax.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_rows import (as_rows, row_maxima,
                                                                     row_sums)
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
    ``_op_common_rows`` (same formula as the general path: max-subtracted)."""
    rows = as_rows(x)
    e = np.subtract(rows, row_maxima(rows)[:, np.newaxis])
    np.exp(e, out=e)
    np.divide(e, row_sums(e)[:, np.newaxis], out=e)
    return e.reshape(x.shape)


def softmax_backward(dy: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    """Gradient w.r.t. x of y = softmax(x) for upstream ``dy``."""
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


def log_softmax_backward(dy: np.ndarray, log_y: np.ndarray, axis: int) -> np.ndarray:
    """Gradient w.r.t. x of log_y = log_softmax(x) for upstream ``dy``."""
    return dy - np.exp(log_y) * np.sum(dy, axis=axis, keepdims=True)
