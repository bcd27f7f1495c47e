"""Shared code of Softmax, LogSoftmax and SoftmaxCrossEntropyLoss: the axis check and
numerically stable (max-subtracted) softmax and log-softmax along one axis.
https://onnx.ai/onnx/operators/onnx__Softmax.html"""
import numpy as np

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
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def softmax_backward(dy: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    """Gradient w.r.t. x of y = softmax(x) for upstream ``dy``."""
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


def log_softmax_backward(dy: np.ndarray, log_y: np.ndarray, axis: int) -> np.ndarray:
    """Gradient w.r.t. x of log_y = log_softmax(x) for upstream ``dy``."""
    return dy - np.exp(log_y) * np.sum(dy, axis=axis, keepdims=True)
