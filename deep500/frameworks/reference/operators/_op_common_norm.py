"""Shared code of the normalization operators (LayerNormalization, RMSNormalization,
GroupNormalization, InstanceNormalization, MeanVarianceNormalization): the ``stash_type``
precision of stage one, standardization and RMS scaling over a set of axes with their
exact gradients, and the checks of scale and bias shapes.
https://onnx.ai/onnx/operators/onnx__LayerNormalization.html"""
import numpy as np

from deep500.utils.errors import Deep500Error, ShapeError

try:  # ONNX's bfloat16 as NumPy sees it (onnx depends on ml_dtypes)
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # pragma: no cover
    _bfloat16 = None

_FLOAT_TYPES = {1: np.float32, 10: np.float16, 11: np.float64}
if _bfloat16 is not None:
    _FLOAT_TYPES[16] = _bfloat16


def onnx_float_dtype(op_type: str, attribute: str, value: int) -> np.dtype:
    """The NumPy dtype of ONNX float type number ``value`` (1 float, 10 float16,
    11 double, 16 bfloat16) given as ``attribute`` (``stash_type``, ``softmax_precision``)."""
    try:
        return np.dtype(_FLOAT_TYPES[int(value)])
    except KeyError:
        raise Deep500Error(f"{op_type}: {attribute}={value} is not a floating-point ONNX type; "
                         f"use 1 (float), 10 (float16), 11 (double) or 16 (bfloat16)") from None


def working_dtype(x: np.ndarray) -> np.dtype:
    """The precision statistics are computed in where the operator has no stash_type: at
    least float32 (float16 and bfloat16 inputs would lose most digits summing)."""
    return np.result_type(x.dtype, np.float32) if x.dtype.itemsize < 4 else x.dtype


def normalized_axes(op_type: str, axis: int, ndim: int) -> tuple:
    """``(axis, ..., ndim - 1)`` for a first normalization axis ``axis`` in [-ndim, ndim)."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op_type}: axis {axis} is out of range for an input of rank {ndim} "
                         f"(valid: {-ndim} to {ndim - 1})")
    return tuple(range(axis % ndim, ndim))


def check_unidirectional(op_type: str, name: str, value, shape: tuple) -> None:
    """A ShapeError unless ``value`` broadcasts to ``shape`` without changing it."""
    try:
        ok = np.broadcast_shapes(np.shape(value), shape) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"{op_type}: {name} of shape {np.shape(value)} does not broadcast "
                         f"unidirectionally to X of shape {tuple(shape)}; give it the trailing "
                         f"(normalized) dimensions of X")


def check_per_channel(op_type: str, name: str, value, X) -> None:
    if X.ndim < 2:
        raise ShapeError(f"{op_type}: X must have shape (N, C, ...) with channels on axis 1, "
                         f"got {X.shape}")
    if np.shape(value) != (X.shape[1],):
        raise ShapeError(f"{op_type}: {name} must have shape ({X.shape[1]},), one value per "
                         f"channel of X of shape {X.shape}, got {np.shape(value)}")


def per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    """A (C,) vector shaped to broadcast against an (N, C, ...) tensor of rank ``ndim``."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def standardize(x: np.ndarray, axes: tuple, epsilon: float):
    """(x_hat, mean, inv_std): x_hat = (x - mean) / sqrt(var + epsilon) with the population
    mean and variance over ``axes`` (kept as size-1 axes), all in x's dtype."""
    mean = np.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    inv_std = x.dtype.type(1) / np.sqrt(var + x.dtype.type(epsilon))
    return centered * inv_std, mean, inv_std


def standardize_backward(d_x_hat, x_hat, inv_std, axes, d_mean=None, d_inv_std=None):
    """Gradient w.r.t. x of :func:`standardize`'s outputs for upstream gradients of x_hat and
    (optionally) of mean and inv_std."""
    count = x_hat.size // inv_std.size
    dx = inv_std * (d_x_hat - np.mean(d_x_hat, axis=axes, keepdims=True)
                    - x_hat * np.mean(d_x_hat * x_hat, axis=axes, keepdims=True))
    if d_mean is not None:
        dx = dx + d_mean.astype(dx.dtype) / count
    if d_inv_std is not None:
        # d inv_std / d var = -inv_std³/2 and d var / dx = 2 (x - mean) / count.
        dx = dx - d_inv_std.astype(dx.dtype) * inv_std * inv_std * x_hat / count
    return dx


def rms_scale(x: np.ndarray, axes: tuple, epsilon: float):
    """(x_hat, inv_rms): x_hat = x / sqrt(mean(x²) + epsilon) over ``axes``."""
    inv_rms = x.dtype.type(1) / np.sqrt(np.mean(x * x, axis=axes, keepdims=True)
                                        + x.dtype.type(epsilon))
    return x * inv_rms, inv_rms


def rms_scale_backward(d_x_hat, x_hat, inv_rms, axes):
    """Gradient w.r.t. x of :func:`rms_scale`'s x_hat."""
    return inv_rms * (d_x_hat - x_hat * np.mean(d_x_hat * x_hat, axis=axes, keepdims=True))
