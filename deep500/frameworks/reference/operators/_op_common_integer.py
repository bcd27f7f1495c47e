"""Integer matrix products and convolutions with zero points, shared by MatMulInteger,
ConvInteger, QLinearMatMul and QLinearConv.
https://onnx.ai/onnx/operators/onnx__MatMulInteger.html

Operands are shifted by their zero points exactly (int64, or float64 for float8 inputs),
multiplied and accumulated in int64 / float64; results that ONNX keeps in int32 are
wrapped to 32 bits ("the accumulation may overflow if and only if in 32 bits").
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.reference.operators._op_common_quantize import saturate, widen
from deep500.frameworks.reference.operators.registry import create_operator
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.cast import FLOAT8

EIGHT_BIT = (np.dtype(np.int8), np.dtype(np.uint8))


def check_type(op_type: str, name: str, tensor, allowed=EIGHT_BIT) -> np.ndarray:
    tensor = np.asarray(tensor)
    if tensor.dtype not in allowed:
        raise ShapeError(f"{op_type}: {name} has type {tensor.dtype}; it must be one of "
                         f"{', '.join(sorted(np.dtype(t).name for t in allowed))}")
    return tensor


def row_operand(op_type: str, name: str, a: np.ndarray, value) -> np.ndarray:
    """A per-tensor or per-row parameter of the left matrix ``a`` (..., M, K) in a shape
    broadcastable to it: a scalar, an M-vector, or (..., M, 1)."""
    value = np.asarray(value)
    if value.ndim == 0 or value.size == 1:
        return value.reshape(())
    if value.ndim == 1 and a.ndim >= 2 and value.shape[0] == a.shape[-2]:
        return value.reshape(-1, 1)
    if value.ndim == a.ndim and value.shape[-1] == 1:
        return value
    raise ShapeError(f"{op_type}: {name} of shape {value.shape} is neither a scalar nor per "
                     f"row of {a.shape} (shape ({a.shape[-2] if a.ndim > 1 else 1},) or "
                     f"{a.shape[:-1] + (1,)})")


def column_operand(op_type: str, name: str, b: np.ndarray, value) -> np.ndarray:
    """A per-tensor or per-column parameter of the right matrix ``b`` (..., K, N): a
    scalar, an N-vector, or (..., 1, N)."""
    value = np.asarray(value)
    if value.ndim == 0 or value.size == 1:
        return value.reshape(())
    if value.ndim == 1 and value.shape[0] == b.shape[-1]:
        return value
    if value.ndim == b.ndim and b.ndim >= 2 and value.shape[-2] == 1:
        return value
    raise ShapeError(f"{op_type}: {name} of shape {value.shape} is neither a scalar nor per "
                     f"column of {b.shape} (shape ({b.shape[-1]},) or "
                     f"{b.shape[:-2] + (1, b.shape[-1])})")


def shifted(tensor: np.ndarray, zero_point) -> np.ndarray:
    """``tensor - zero_point`` exactly (zero_point already broadcastable; None is 0)."""
    values = widen(tensor)
    return values if zero_point is None else values - widen(zero_point)


def matmul(op_type: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"{op_type}: the inputs must have rank >= 1, got shapes {a.shape} "
                         f"and {b.shape}")
    try:
        return np.matmul(a, b)
    except ValueError:
        raise ShapeError(f"{op_type}: shapes {a.shape} and {b.shape} cannot be multiplied as "
                         f"numpy.matmul does") from None


def channel_operand(op_type: str, name: str, w: np.ndarray, value) -> np.ndarray:
    """A per-tensor or per-output-channel parameter of the weights ``w`` (M, C/group,
    *kernel), broadcastable to them: a scalar or an M-vector."""
    value = np.asarray(value)
    if value.ndim == 0 or value.size == 1:
        return value.reshape(())
    if value.ndim == 1 and value.shape[0] == w.shape[0]:
        return value.reshape((-1,) + (1,) * (w.ndim - 1))
    raise ShapeError(f"{op_type}: {name} of shape {value.shape} must be a scalar or have "
                     f"one value per output channel ({w.shape[0]},)")


def convolve(op_type: str, x: np.ndarray, w: np.ndarray, attributes: dict) -> np.ndarray:
    """The reference Conv of the shifted integer operands, in int64 (float64 values are
    convolved as float64)."""
    if x.ndim < 3:
        raise ShapeError(f"{op_type}: x must be (N, C, *spatial) with at least one spatial "
                         f"axis, got shape {x.shape}")
    dtype = np.result_type(x, w)
    return create_operator("Conv", **attributes).forward(x.astype(dtype), w.astype(dtype))


def wrap_int32(values: np.ndarray) -> np.ndarray:
    """int64 values reduced modulo 2^32 into int32 (two's complement)."""
    return np.asarray(values).astype(np.int64).astype(np.int32)


QLINEAR_TYPES = tuple(EIGHT_BIT) + tuple(sorted(FLOAT8, key=str))
"""Quantized types of QLinearMatMul (opset 21: int8, uint8 and the float8 types)."""


def requantize(op_type: str, accumulated: np.ndarray, scales: tuple, y_scale,
               y_zero_point, dtype: np.dtype) -> np.ndarray:
    """``saturate(round(accumulated · (s1 · s2 / y_scale)) + y_zero_point)`` in ``dtype``.

    The multiplier is computed in the scales' type (as ONNX's evaluator does), the
    product with the exact accumulator in float64, rounding half to even."""
    first, second = scales
    try:
        multiplier = np.asarray(first) * np.asarray(second) / np.asarray(y_scale)
        np.broadcast_shapes(accumulated.shape, multiplier.shape)
        if y_zero_point is not None:
            np.broadcast_shapes(accumulated.shape, np.shape(y_zero_point))
    except ValueError:
        raise ShapeError(f"{op_type}: the scales {np.shape(first)}, {np.shape(second)}, "
                         f"y_scale {np.shape(y_scale)} or y_zero_point "
                         f"{np.shape(y_zero_point)} do not broadcast to the output "
                         f"{accumulated.shape}") from None
    values = accumulated.astype(np.float64) * widen(multiplier)
    return saturate(values, y_zero_point, dtype)
