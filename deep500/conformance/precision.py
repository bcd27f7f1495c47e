"""How precisely a floating dtype holds a result, and the tolerance a comparison grants it.

ONNX's backend test runner compares every floating output with ``rtol=1e-3, atol=1e-7``.
That is about 8000 ULPs of float32, but less than one ULP of float16 (machine epsilon
2^-10), bfloat16 (2^-7) or the float8/float4 types: a float16 or bfloat16 result that
rounds its last bit differently from ONNX's reference, as any change of evaluation order
does, fails it. So a dtype with fewer significand bits than float32 is also granted a
number of its own ULPs (units in the last place, ``numpy.spacing`` of the expected value):

* ``ROUNDING_ULPS`` for what every result carries: the executor and ONNX's reference each
  round it once (half an ULP each), and library exp/tanh/erf are faithful to an ULP or
  two rather than correctly rounded.
* ``2 n`` more where each output element sums ``n`` terms (a matrix product, a
  convolution, attention; see :mod:`deep500.conformance.reductions`). Recursive summation
  and inner products of ``n`` terms in precision ``u`` err by at most
  ``gamma_n = n u / (1 - n u)`` relative to ``sum |x_i|`` (Higham, *Accuracy and Stability
  of Numerical Algorithms*, 2nd ed., SIAM 2002, Lemma 3.1 and eq. (3.5); eq. (4.4) for
  sums). ``u`` is half of machine epsilon, and an ULP of ``s`` is at least ``u |s|``, so
  with terms of one sign (attention's softmax weights, ONNX's ``rand`` test data) that is
  at most ``n`` ULPs of the result, and twice that when both sides round every partial
  sum in the low precision, as ONNX's reference does (``onnx.reference`` computes a
  bfloat16 attention in bfloat16, step by step).
* none for conversions (Cast, CastLike, QuantizeLinear): ONNX defines one result, the
  input rounded to nearest even (or saturated), so any other value is a rounding bug.

float32 and float64 keep ONNX's tolerances unchanged. An element passes when it is within
``atol + rtol |expected|`` (as ``numpy.testing.assert_allclose``) or within the granted
ULPs; NaN must meet NaN and an infinity the same infinity.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RTOL = 1e-3   # ONNX's backend test runner defaults
DEFAULT_ATOL = 1e-7
ROUNDING_ULPS = 4
EXACT_CONVERSIONS = frozenset({"Cast", "CastLike", "QuantizeLinear"})
_FLOAT32_SIGNIFICAND_BITS = np.finfo(np.float32).nmant


@dataclass(frozen=True)
class Tolerance:
    """What a case's outputs may differ by: ONNX's ``rtol`` and ``atol`` for every
    floating dtype, plus :meth:`ulps` of a dtype narrower than float32. ``op_type`` is the
    operator the case tests, ``reduction_length`` how many terms each output element
    sums."""
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    op_type: str = ""
    reduction_length: int = 0

    def ulps(self, dtype) -> int:
        """ULPs of ``dtype`` granted beyond ``rtol`` and ``atol``: 0 for float32, float64,
        non-floating dtypes and exact conversions, else ``ROUNDING_ULPS + 2 n``."""
        if not is_low_precision(dtype) or self.op_type in EXACT_CONVERSIONS:
            return 0
        return ROUNDING_ULPS + 2 * self.reduction_length

    def relative(self, dtype) -> float:
        """The relative error the tolerance grants at the top of a binade: ``rtol`` or the
        granted ULPs times machine epsilon, whichever is larger."""
        return max(self.rtol, self.ulps(dtype) * machine_epsilon(dtype))


def is_float(dtype) -> bool:
    """NumPy's floating dtypes and ml_dtypes' (bfloat16, float8_*, float4_e2m1fn)."""
    dtype = np.dtype(dtype)
    return np.issubdtype(dtype, np.floating) or (
        is_ml_dtype(dtype) and dtype.name.startswith(("bfloat", "float")))


def is_ml_dtype(dtype) -> bool:
    return np.dtype(dtype).type.__module__.startswith("ml_dtypes")


def is_low_precision(dtype) -> bool:
    """A floating dtype with fewer significand bits than float32."""
    return is_float(dtype) and _finfo(dtype).nmant < _FLOAT32_SIGNIFICAND_BITS


def machine_epsilon(dtype) -> float:
    """The distance from 1 to the next larger value of ``dtype`` (2^-nmant)."""
    return float(2.0 ** -_finfo(dtype).nmant)


def spacing(values, dtype) -> np.ndarray:
    """``numpy.spacing`` in ``dtype`` of each of ``values`` (any floating array, read as
    exact real numbers): the ULP of the binade holding ``|value|``, down to the smallest
    subnormal (and, unlike ``numpy.spacing``, finite at the largest finite value). Works
    for ml_dtypes' types too, whose ``numpy.spacing`` is not defined for every type."""
    info = _finfo(dtype)
    magnitude = np.abs(np.asarray(values, dtype=np.float64))
    _, exponent = np.frexp(magnitude)          # magnitude = m 2^exponent, 0.5 <= m < 1
    binade = np.where(magnitude > 0, exponent.astype(np.int64) - 1, int(info.minexp))
    binade = np.maximum(binade, int(info.minexp))
    return np.ldexp(1.0, binade - int(info.nmant))


def _finfo(dtype):
    dtype = np.dtype(dtype)
    if is_ml_dtype(dtype):
        import ml_dtypes
        return ml_dtypes.finfo(dtype)
    return np.finfo(dtype)
