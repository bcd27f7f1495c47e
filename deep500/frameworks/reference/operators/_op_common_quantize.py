"""Linear quantization shared by QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear
and the QLinear operators. https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html

A scale (and its zero point, of the same shape) sets the granularity:

* per tensor: a scalar (or one element);
* per axis: a 1-D tensor with one value per index of ``axis`` of the input;
* blocked (``block_size`` B > 0): the input's shape with ``axis`` D shortened to
  ceil(D / B); each value covers B consecutive indices of that axis (the last block
  may be shorter).

Quantizing computes ``saturate(round(x / scale) + zero_point)`` with rounding half to
even: integers saturate to their type's range, float8 types convert by Cast's rules
(``saturate``), FLOAT4E2M1 and the float6 types always saturate (no inf encoding).
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import is_floating
from deep500.utils.errors import ShapeError, UnsupportedError
from deep500.utils.onnx_interop.cast import FLOAT4, FLOAT8, convert, target_dtype

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - installed with onnx
    ml_dtypes = None


def _ml(name: str):
    if ml_dtypes is None or not hasattr(ml_dtypes, name):
        return None
    return np.dtype(getattr(ml_dtypes, name))


INTEGER_RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255),
                  np.dtype(np.int16): (-32768, 32767), np.dtype(np.uint16): (0, 65535)}
for _name, _range in (("int4", (-8, 7)), ("uint4", (0, 15)), ("int2", (-2, 1)),
                      ("uint2", (0, 3))):
    if _ml(_name) is not None:
        INTEGER_RANGES[_ml(_name)] = _range
FLOAT6 = {_ml("float6_e2m3fn"), _ml("float6_e3m2fn")} - {None}
SATURATING_FLOATS = ({FLOAT4} | FLOAT6) - {None}
"""Float types with no inf or NaN: out-of-range values always become ± their maximum."""
QUANTIZED = set(INTEGER_RANGES) | FLOAT8 | SATURATING_FLOATS
"""The types QuantizeLinear can produce (and DequantizeLinear read, with int32)."""
E8M0 = _ml("float8_e8m0fnu")


def type_name(dtype) -> str:
    return np.dtype(dtype).name


def output_type(op_type: str, zero_point, output_dtype) -> np.dtype:
    """QuantizeLinear's output type: the zero point's type, else ``output_dtype`` (a
    TensorProto.DataType, 0 for none), else uint8; both given must agree."""
    attribute = target_dtype(op_type, output_dtype) if output_dtype else None
    if zero_point is not None:
        dtype = np.asarray(zero_point).dtype
        if attribute is not None and attribute != dtype:
            raise ShapeError(f"{op_type}: output_dtype={output_dtype} ({attribute}) differs "
                             f"from the zero point's type {dtype}; they must agree (or "
                             f"leave output_dtype out)")
    else:
        dtype = attribute if attribute is not None else np.dtype(np.uint8)
    if dtype not in QUANTIZED:
        raise UnsupportedError(f"{op_type}: cannot quantize to {dtype}; the quantized types "
                               f"are {sorted(type_name(t) for t in QUANTIZED)}")
    return dtype


def normalize_axis(op_type: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{op_type}: axis={axis} is out of range for an input of rank "
                         f"{rank}; use -{rank} ... {rank - 1}")
    return axis % rank


def expand(op_type: str, name: str, value, shape: tuple, axis: int,
           block_size: int) -> np.ndarray:
    """``value`` (a scale or zero point) as an array broadcastable to ``shape``, by the
    granularity its shape and ``block_size`` give (see the module doc)."""
    value = np.asarray(value)
    if value.ndim == 0 or (value.ndim == 1 and value.size == 1 and not block_size):
        return value.reshape(())
    if block_size is None or block_size == 0:
        if value.ndim != 1:
            raise ShapeError(f"{op_type}: {name} of shape {value.shape} needs block_size > "
                             f"0 (blocked quantization); without it {name} must be a "
                             f"scalar or 1-D (per axis)")
        axis = normalize_axis(op_type, axis, len(shape))
        if value.size != shape[axis]:
            raise ShapeError(f"{op_type}: per-axis {name} has {value.size} values but axis "
                             f"{axis} of the input {tuple(shape)} has {shape[axis]}")
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    if block_size < 0:
        raise ShapeError(f"{op_type}: block_size={block_size} must be positive (or 0 for "
                         f"per-tensor/per-axis quantization)")
    axis = normalize_axis(op_type, axis, len(shape))
    blocks = -(-shape[axis] // block_size)
    expected = tuple(shape[:axis]) + (blocks,) + tuple(shape[axis + 1:])
    if value.shape != expected:
        raise ShapeError(f"{op_type}: blocked {name} for input {tuple(shape)}, axis={axis}, "
                         f"block_size={block_size} must have shape {expected} (ceil("
                         f"{shape[axis]}/{block_size}) = {blocks} blocks), got "
                         f"{value.shape}")
    return np.repeat(value, block_size, axis=axis).take(np.arange(shape[axis]), axis=axis)


def reduce_to(op_type: str, full: np.ndarray, value_shape: tuple, axis: int,
              block_size: int) -> np.ndarray:
    """The adjoint of ``expand``: ``full`` (the input's shape) summed onto a parameter of
    shape ``value_shape``."""
    if len(value_shape) == 0 or (len(value_shape) == 1 and value_shape[0] == 1
                                 and not block_size):
        return full.sum().reshape(value_shape)
    axis = normalize_axis(op_type, axis, full.ndim)
    if not block_size:
        others = tuple(i for i in range(full.ndim) if i != axis)
        return full.sum(axis=others).reshape(value_shape)
    blocks = value_shape[axis]
    padding = [(0, 0)] * full.ndim
    padding[axis] = (0, blocks * block_size - full.shape[axis])
    padded = np.pad(full, padding)
    split = padded.shape[:axis] + (blocks, block_size) + padded.shape[axis + 1:]
    return padded.reshape(split).sum(axis=axis + 1)


def widen(x: np.ndarray) -> np.ndarray:
    """Values of ``x`` in a NumPy type that holds them exactly: int64 for integers (the
    4- and 2-bit ones too), float64 for floats (float8, float4, float6 and bfloat16)."""
    x = np.asarray(x)
    if is_floating(x.dtype):
        return x.astype(np.float64)
    return x.astype(np.int64)


def divide(op_type: str, x, scale, precision) -> np.ndarray:
    """``x / scale`` in the precision type (``precision``, a TensorProto.DataType, 0 for
    none: the scale's type). A FLOAT8E8M0 scale (powers of two) divides in float32."""
    dtype = target_dtype(op_type, precision) if precision else np.asarray(scale).dtype
    if dtype == E8M0:
        dtype = np.dtype(np.float32)
    if not is_floating(dtype):
        raise ShapeError(f"{op_type}: the division x / scale needs a float precision type, "
                         f"got {dtype} (the scale's type, or the precision attribute)")
    return np.asarray(x).astype(dtype) / np.asarray(scale).astype(dtype)


def saturate(values, zero_point, dtype: np.dtype, saturate_float8: bool = True) -> np.ndarray:
    """``saturate(round(values) + zero_point)`` in ``dtype``: integers round half to even
    and clip to their range (NaN has no defined result; it becomes the zero point);
    floats add the zero point and convert by Cast's rules."""
    values = np.asarray(values)
    zero = 0 if zero_point is None else widen(zero_point)
    with np.errstate(all="ignore"):
        if dtype in INTEGER_RANGES:
            low, high = INTEGER_RANGES[dtype]
            rounded = np.rint(values.astype(np.float64))
            rounded = np.where(np.isnan(rounded), 0.0, rounded) + zero
            return np.clip(rounded, low, high).astype(np.int64).astype(dtype)
        shifted = values.astype(np.float64) + zero
        if dtype in FLOAT8:
            return convert(shifted, dtype, saturate_float8)
        if dtype == FLOAT4:
            return convert(shifted, dtype)
        if dtype in FLOAT6:
            limit = float(ml_dtypes.finfo(dtype).max)
            return np.clip(shifted, -limit, limit).astype(dtype)
    raise UnsupportedError(f"cannot quantize to {dtype}; the quantized types are "
                           f"{sorted(type_name(t) for t in QUANTIZED)}")


def check_zero_point(op_type: str, name: str, tensor, zero_point) -> None:
    """A zero point must have its quantized tensor's type."""
    if zero_point is not None and np.asarray(zero_point).dtype != np.asarray(tensor).dtype:
        raise ShapeError(f"{op_type}: {name} has type {np.asarray(zero_point).dtype} but "
                         f"its tensor has {np.asarray(tensor).dtype}; they must match")


def check_pair(op_type: str, scale_name: str, zero_name: str, scale, zero_point) -> None:
    """A scale and its zero point have the same shape (one element each also counts as
    per tensor: ONNX's own test models pair a scalar with a one-element vector)."""
    if zero_point is None:
        return
    same = np.shape(zero_point) == np.shape(scale)
    if not same and not (np.size(zero_point) == 1 == np.size(scale)):
        raise ShapeError(f"{op_type}: {zero_name} {np.shape(zero_point)} and {scale_name} "
                         f"{np.shape(scale)} must have the same shape")
