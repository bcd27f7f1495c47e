"""Conversion between ONNX element types (Cast, CastLike, and the casts inside
QuantizeLinear and friends), once for every executor: the reference executor converts
with it; PyTorch where its own conversion differs (FLOAT8E8M0's round modes).
https://onnx.ai/onnx/operators/onnx__Cast.html

Every ONNX element type NumPy can hold is supported: bool, the integers, float16/32/64,
complex, strings (object arrays of ``str``), and through ml_dtypes bfloat16, the float8
types (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), FLOAT4E2M1 and the 4- and 2-bit integers.

The rules, from the operator's page:

* integer to narrower integer keeps the low bits (two's complement): 200 -> int8 -56;
  this also holds for the 4- and 2-bit types, from floats truncated toward zero;
* float to float8 rounds to nearest even; with ``saturate`` (the default) values beyond
  the largest finite value, infinities included, become ± that value, without it they
  become NaN (±inf for E5M2);
* float to FLOAT8E8M0 (a power of two, 2^-127 ... 2^127) rounds as ``round_mode`` says
  ("up", "down", "nearest": ties up); with ``saturate`` zero and values below 2^-127
  become 2^-127 and values above 2^127 (or +inf) 2^127, without it they become NaN. The
  sign is dropped (negative inputs are undefined in ONNX);
* float to FLOAT4E2M1 (no inf, no NaN) always saturates to ±6; NaN becomes -0, as
  ml_dtypes and ONNX's backend test data have it (ONNX's float4 note says 6);
* strings parse as numbers ("1e-5", "+INF", "nan", case-insensitive); numbers become their
  shortest round-trip text ("0.1", "1e+10", "nan").
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from deep500.utils.errors import Deep500Error, UnsupportedError

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - installed with onnx
    ml_dtypes = None

def is_floating(dtype) -> bool:
    """Whether ``dtype`` is a floating-point type: NumPy's float16/32/64 or one of the
    ml_dtypes types ONNX uses (bfloat16, float8, float4)."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return True
    return (dtype.type.__module__.startswith("ml_dtypes")
            and dtype.name.startswith(("bfloat", "float")))


def dtype_kind(dtype) -> str:
    """'f' (floating, ml_dtypes floats included), 'i' (signed), 'u' (unsigned integer),
    'b' (bool), or NumPy's own kind letter for anything else (strings: 'U', 'S', 'O')."""
    dtype = np.dtype(dtype)
    if is_floating(dtype):
        return "f"
    if dtype.type.__module__.startswith("ml_dtypes"):   # int4, uint4, int2, uint2
        return "i" if dtype.name.startswith("int") else "u"
    return dtype.kind


STRING = np.dtype(object)
"""The dtype of ONNX string tensors here."""

ROUND_MODES = ("up", "down", "nearest")


def _ml_dtype(name: str):
    return np.dtype(getattr(ml_dtypes, name)) if ml_dtypes is not None else None


FLOAT8 = {_ml_dtype(n) for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                                 "float8_e5m2fnuz")} - {None}
E8M0 = _ml_dtype("float8_e8m0fnu")
FLOAT4 = _ml_dtype("float4_e2m1fn")
SMALL_INTEGERS = {_ml_dtype(n) for n in ("int4", "uint4", "int2", "uint2")} - {None}


def target_dtype(op_type: str, to) -> np.dtype:
    """The NumPy dtype of ONNX element type ``to`` (a TensorProto.DataType value, or its
    name as in opsets before 6, e.g. "FLOAT")."""
    if isinstance(to, bytes):
        to = to.decode()
    if isinstance(to, str):
        try:
            to = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise Deep500Error(f"{op_type}: to={to!r} is not an ONNX element type (names: "
                               f"{', '.join(onnx.TensorProto.DataType.keys())})") from None
    try:
        to = int(to)
        name = onnx.TensorProto.DataType.Name(to)
    except (TypeError, ValueError):
        raise Deep500Error(f"{op_type}: to={to!r} is not an ONNX element type") from None
    if to == onnx.TensorProto.STRING:
        return STRING
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        raise UnsupportedError(f"{op_type}: the reference framework cannot convert to "
                               f"{name}: NumPy and ml_dtypes have no such type") from None
    if dtype.type.__module__.startswith("ml_dtypes") and ml_dtypes is None:
        raise UnsupportedError(f"{op_type}: converting to {name} needs the ml_dtypes "
                               f"package (pip install ml_dtypes)")
    return dtype


def is_string(dtype) -> bool:
    return np.dtype(dtype).kind in "OUS"


def convert(x, dtype: np.dtype, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` converted to ``dtype`` by the rules of ONNX's Cast (see the module doc)."""
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    with np.errstate(all="ignore"):   # out-of-range float -> int is undefined, not an error
        if is_string(dtype):
            return _to_string(x)
        if is_string(x.dtype):
            x = _from_string(x, dtype)
        if dtype == E8M0:
            return _to_e8m0(_as_float(x), saturate, round_mode)
        if dtype in FLOAT8:
            x = _as_float(x)
            if saturate:
                limit = float(ml_dtypes.finfo(dtype).max)
                x = np.clip(x, -limit, limit)   # ±inf too; NaN stays NaN
            return x.astype(dtype)
        if dtype == FLOAT4:
            x = _as_float(x)
            limit = float(ml_dtypes.finfo(dtype).max)
            return np.where(np.isnan(x), -0.0, np.clip(x, -limit, limit)).astype(dtype)
        if dtype in SMALL_INTEGERS:
            return _to_small_integer(x, dtype)
        if dtype == np.bool_:
            return _widen(x) != 0
        return _widen(x).astype(dtype)


def _widen(x: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays as the NumPy type that holds them exactly (float32, int8, uint8);
    other arrays unchanged."""
    if not x.dtype.type.__module__.startswith("ml_dtypes"):
        return x
    kind = dtype_kind(x.dtype)
    return x.astype({"f": np.float32, "i": np.int8, "u": np.uint8}[kind])


def _as_float(x: np.ndarray) -> np.ndarray:
    """``x`` as a NumPy float array holding its values exactly (integers as float64)."""
    x = _widen(x)
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)


def _to_small_integer(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Two's complement wrap-around into a 4- or 2-bit integer type."""
    bits = 4 if dtype.name.endswith("4") else 2
    low = _widen(x).astype(np.int64) & ((1 << bits) - 1)
    if dtype.name.startswith("int"):
        low = np.where(low >= 1 << (bits - 1), low - (1 << bits), low)
    return low.astype(dtype)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Powers of two 2^(bits - 127), bits 0 ... 254; bits 255 is NaN."""
    if round_mode not in ROUND_MODES:
        raise Deep500Error(f"Cast: round_mode must be one of {ROUND_MODES}, got "
                           f"{round_mode!r}")
    magnitude = np.abs(x.astype(np.float64))
    mantissa, exponent = np.frexp(magnitude)   # magnitude = mantissa·2^exponent, m in [.5, 1)
    floor_log2 = exponent.astype(np.int64) - 1
    if round_mode == "down":
        log2 = floor_log2
    elif round_mode == "up":
        log2 = floor_log2 + (mantissa != 0.5)
    else:   # nearest: 1.5·2^k and above round up
        log2 = floor_log2 + (mantissa >= 0.75)
    bits = log2 + 127
    finite = np.isfinite(magnitude) & (magnitude > 0)
    bits = np.where(finite, bits, 0)
    if saturate:
        bits = np.clip(bits, 0, 254)
        bits = np.where(magnitude == 0, 0, bits)
        bits = np.where(np.isinf(magnitude), 254, bits)
    else:
        bits = np.where((bits < 0) | (bits > 254) | ~finite, 255, bits)
    bits = np.where(np.isnan(magnitude), 255, bits)
    return bits.astype(np.uint8).view(E8M0)


def _to_string(x: np.ndarray) -> np.ndarray:
    if is_string(x.dtype):
        return _text(x).astype(object)
    return _widen(x).astype(np.str_).astype(object)


def _text(x: np.ndarray) -> np.ndarray:
    """A string array (``str``, even where the elements are ``bytes``)."""
    if x.dtype.kind == "S" or (x.dtype == object and x.size and isinstance(x.flat[0], bytes)):
        return np.char.decode(x.astype(np.bytes_), "utf-8")
    return x.astype(np.str_)


def _from_string(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Parse strings: as int64 where the target is an integer (integer literals exactly,
    others truncated toward zero), as float64 (or complex128) otherwise."""
    text = np.char.strip(_text(x))
    if dtype == np.bool_:
        # "True" and "False" (what a bool tensor becomes as text) read back as 1 and 0.
        lower = np.char.lower(text)
        text = np.where(lower == "true", "1", np.where(lower == "false", "0", text))
    try:
        if dtype_kind(dtype) in "iub":
            # Integer literals exactly (beyond float64's 2^53), others truncated.
            integral = np.char.isdigit(np.char.lstrip(text, "+-"))
            exact = np.where(integral, text, "0").astype(np.int64)
            rounded = np.trunc(np.where(integral, "0", text).astype(np.float64))
            return np.where(integral, exact, rounded.astype(np.int64))
        if np.issubdtype(dtype, np.complexfloating):
            return text.astype(np.complex128)
        return text.astype(np.float64)
    except ValueError as exc:
        raise Deep500Error(f"Cast: cannot read a number from a string of the input: "
                           f"{exc}") from None


def cast_gradient(grad, input_dtype, output_dtype):
    """The gradient of a cast: the upstream gradient converted back to the input's type,
    for float-to-float casts; None (not differentiable) otherwise."""
    if not (is_floating(input_dtype) and is_floating(output_dtype)):
        return None
    return np.asarray(grad).astype(input_dtype)
