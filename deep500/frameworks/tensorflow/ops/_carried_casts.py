"""ONNX element types TensorFlow holds but cannot compute with, and ONNX's casts to them
in TensorFlow operations.

TensorFlow has no Cast (or other) kernels for int4/uint4/int2/uint2, FLOAT4E2M1, the
FNUZ float8 types and FLOAT8E8M0, and its float8 E4M3FN/E5M2 casts neither saturate as
ONNX's Cast does by default nor round float64 to nearest even. Values of these types are
therefore *carried* in a wider type that holds each of them exactly
(``deep500.utils.onnx_interop.carried_types``: int8, uint8 or float32). Operators that
produce them (Cast, CastLike, QuantizeLinear) round and saturate here, by the rules of
https://onnx.ai/onnx/operators/onnx__Cast.html (the NumPy form every executor shares is
``deep500.utils.onnx_interop.cast``), and return the carrier.

A floating value is rounded to the target's grid (round to nearest, ties to even) as
``round(|x|·2^(m - e))·2^(e - m)`` in float64, where m is the target's mantissa width and
e the exponent of |x|, at least the target's smallest normal exponent (below it the
spacing of the subnormals holds); multiplying by a power of two is exact, so this is the
correctly rounded value (https://onnx.ai/onnx/technical/float8.html).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.utils.onnx_interop.carried_types import carriers
from deep500.utils.onnx_interop.cast import E8M0, FLOAT4, FLOAT8, ROUND_MODES, SMALL_INTEGERS
from deep500.utils.errors import Deep500Error

# {ml_dtypes type: the NumPy type that carries it}
CARRIED = carriers(("int4", "uint4", "int2", "uint2", "float4_e2m1fn", "float8_e4m3fn",
                    "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"))

_FLOAT64_BIAS, _FLOAT64_MANTISSA = 1023, 52


def is_carried(dtype) -> bool:
    return dtype is not None and np.dtype(dtype) in CARRIED


def cast_to_carried(x, dtype, saturate: bool = True, round_mode: str = "up"):
    """``x`` (a TensorFlow tensor) converted to the carried type ``dtype`` by ONNX's Cast
    rules, returned in ``dtype``'s carrier."""
    dtype = np.dtype(dtype)
    carrier = tf.as_dtype(CARRIED[dtype])
    if dtype in SMALL_INTEGERS:
        return tf.cast(_wrapped(x, dtype), carrier)
    if dtype == E8M0:
        return _e8m0(tf.cast(x, tf.float64), saturate, round_mode)
    if dtype in FLOAT8 or dtype == FLOAT4:
        # Through float32, as ml_dtypes (and so ONNX's reference) converts.
        wide = tf.cast(tf.cast(x, tf.float32), tf.float64)
        return tf.cast(_minifloat(wide, dtype, saturate), carrier)
    raise AssertionError(dtype)   # CARRIED holds no other type


def _power_of_two(exponent):
    """2^exponent in float64, exactly, for int64 exponents in [-1022, 1023]."""
    return tf.bitcast(tf.bitwise.left_shift(exponent + _FLOAT64_BIAS, _FLOAT64_MANTISSA),
                      tf.float64)


def _exponent_bits(magnitude):
    """(exponent, fraction) fields of non-negative float64 values: the exponent is
    floor(log2(magnitude)) for normal values."""
    bits = tf.bitcast(magnitude, tf.int64)
    exponent = tf.bitwise.right_shift(bits, _FLOAT64_MANTISSA) - _FLOAT64_BIAS
    fraction = tf.bitwise.bitwise_and(bits, (1 << _FLOAT64_MANTISSA) - 1)
    return exponent, fraction


def _negative(wide):
    """The sign bit (true for -0.0 too)."""
    return tf.bitwise.right_shift(tf.bitcast(wide, tf.int64), 63) != 0


def _minifloat(wide, dtype, saturate: bool):
    """A float8 or float4 value, rounded to nearest even; saturated to ± the largest
    finite value (FLOAT4E2M1 always, others with ``saturate``), else beyond it NaN (inf
    for E5M2, which has infinities); FNUZ types have no -0, FLOAT4E2M1 no NaN (-0)."""
    info = ml_dtypes.finfo(dtype)
    largest = float(info.max)
    fnuz = dtype.name.endswith("fnuz")
    has_inf = dtype == np.dtype(ml_dtypes.float8_e5m2)
    nan = tf.math.is_nan(wide)
    if saturate or dtype == FLOAT4:
        wide = tf.where(nan, wide, tf.clip_by_value(wide, -largest, largest))
    magnitude = tf.abs(wide)
    exponent, _ = _exponent_bits(magnitude)
    exponent = tf.clip_by_value(exponent, int(info.minexp), _FLOAT64_BIAS)
    scale = _power_of_two(int(info.nmant) - exponent)
    rounded = tf.round(magnitude * scale) / scale
    if not saturate:
        beyond = tf.constant(np.inf if has_inf else np.nan, tf.float64)
        rounded = tf.where(rounded > largest, beyond, rounded)
    value = tf.where(_negative(wide), -rounded, rounded)
    if fnuz:
        value = tf.where(value == 0, tf.zeros_like(value), value)
    if dtype == FLOAT4:
        # -zeros, not tf.constant(-0.0): eager TensorFlow caches scalar constants by
        # value, and -0.0 == 0.0 may return a cached +0.
        return tf.where(nan, -tf.zeros_like(value), value)
    return value


def _e8m0(wide, saturate: bool, round_mode: str):
    """A power of two 2^(k - 127), k in 0 ... 254 (k = 255: NaN), rounded as
    ``round_mode`` says (nearest: ties up); the sign is dropped. Returned in float32,
    made from its bits: 2^-127 is a float32 subnormal, which a cast from float64 would
    flush to zero on TensorFlow's CPU kernels."""
    if round_mode not in ROUND_MODES:
        raise Deep500Error(f"Cast: round_mode must be one of {ROUND_MODES}, got "
                           f"{round_mode!r}")
    magnitude = tf.abs(wide)
    floor_log2, fraction = _exponent_bits(magnitude)
    if round_mode == "up":
        log2 = floor_log2 + tf.cast(fraction != 0, tf.int64)
    elif round_mode == "nearest":   # 1.5·2^k and above round up
        log2 = floor_log2 + tf.cast(fraction >= 1 << (_FLOAT64_MANTISSA - 1), tf.int64)
    else:
        log2 = floor_log2
    code = log2 + 127
    finite = tf.math.is_finite(magnitude) & (magnitude > 0)
    code = tf.where(finite, code, tf.zeros_like(code))
    if saturate:
        code = tf.clip_by_value(code, 0, 254)
        code = tf.where(tf.math.is_inf(magnitude), tf.fill(tf.shape(code), np.int64(254)),
                        code)
    else:
        code = tf.where((code < 0) | (code > 254) | ~finite,
                        tf.fill(tf.shape(code), np.int64(255)), code)
    code = tf.where(tf.math.is_nan(magnitude), tf.fill(tf.shape(code), np.int64(255)), code)
    # float32 bits: k << 23 is 2^(k - 127) for k >= 1; 2^-127 is the subnormal 1 << 22.
    bits = tf.where(code == 0, tf.fill(tf.shape(code), np.int64(1 << 22)),
                    tf.bitwise.left_shift(code, 23))
    bits = tf.where(code == 255, tf.fill(tf.shape(code), np.int64(0x7FC00000)), bits)
    return tf.bitcast(tf.cast(bits, tf.int32), tf.float32)


def _wrapped(x, dtype):
    """A 4- or 2-bit integer: floats truncated toward zero, then the low bits kept
    (two's complement wrap-around)."""
    bits = 4 if dtype.name.endswith("4") else 2
    whole = tf.cast(x, tf.int64)
    low = tf.bitwise.bitwise_and(whole, (1 << bits) - 1)
    if dtype.name.startswith("int"):
        low = tf.where(low >= 1 << (bits - 1), low - (1 << bits), low)
    return low
