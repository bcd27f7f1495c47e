"""Comparing an executor's outputs with a case's expected ones, as ONNX's backend test
runner does (``numpy.testing.assert_allclose``, rtol=1e-3, atol=1e-7, NaN where NaN is
expected; integer, boolean and string outputs exactly), with the ULPs that
:mod:`deep500.conformance.precision` grants dtypes narrower than float32.

A mismatch raises :class:`Mismatch` (an ``AssertionError``) that says what differs
(``kind``) and, for values, how far: the largest error in ULPs of the output's largest
magnitude, and that error over the tolerance's at that magnitude (``near_miss``, a
normwise comparison: Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, §3,
bounds the error of a sum relative to the sum of magnitudes, so an element that cancels
to nearly 0 has no relative error an elementwise test could judge).
"""
from __future__ import annotations

import numpy as np

from deep500.conformance.precision import Tolerance, is_float, is_ml_dtype, spacing

KINDS = ("values", "nonfinite", "shape", "dtype", "missing", "structure", "data")


class Mismatch(AssertionError):
    """An output that differs from the expected one. ``kind``: ``values`` (finite values
    beyond the tolerance), ``nonfinite`` (NaN or infinities elsewhere), ``shape``,
    ``dtype``, ``missing`` (an output not returned), ``structure`` (a tensor where a
    sequence or optional is expected, or the reverse) or ``data`` (the test has another
    number of expected outputs than the graph has outputs)."""

    def __init__(self, message: str, kind: str, max_ulp: float | None = None,
                 near_miss: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.max_ulp = max_ulp
        self.near_miss = near_miss


def compare_outputs(expected: list, outputs: dict, names: list[str],
                    tolerance: Tolerance | None = None) -> list[str]:
    """Raise :class:`Mismatch` unless ``outputs[names[i]]`` matches ``expected[i]``;
    returns the outputs that match only thanks to the ULPs granted to their dtype."""
    if len(expected) != len(names):
        raise Mismatch(f"the test has {len(expected)} expected outputs for the graph's "
                       f"{len(names)} outputs {names}", "data")
    widened = []
    for name, value in zip(names, expected):
        if name not in outputs:
            raise Mismatch(f"no output {name!r} (returned: {sorted(outputs)})", "missing")
        if assert_similar(value, outputs[name], tolerance, where=f"output {name!r}"):
            widened.append(name)
    return widened


def assert_similar(expected, actual, tolerance: Tolerance | None = None,
                   where: str = "output") -> bool:
    """Compare one value (a tensor, a sequence of tensors, or None) with its expected
    value; True when it matches only thanks to the ULPs granted to its dtype."""
    tolerance = tolerance or Tolerance()
    if expected is None:
        if actual is not None:
            raise Mismatch(f"{where}: expected an empty optional, got "
                           f"{type(actual).__name__}", "structure")
        return False
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            raise Mismatch(f"{where}: expected a sequence of {len(expected)} tensors, got "
                           f"{type(actual).__name__}", "structure")
        if len(actual) != len(expected):
            raise Mismatch(f"{where}: expected a sequence of {len(expected)} tensors, got "
                           f"{len(actual)}", "structure")
        return any([assert_similar(e, a, tolerance, where=f"{where}[{index}]")
                    for index, (e, a) in enumerate(zip(expected, actual))])
    if actual is None or isinstance(actual, (list, tuple)):
        raise Mismatch(f"{where}: expected a tensor, got {type(actual).__name__}",
                       "structure")
    expected, actual = np.asarray(expected), np.asarray(actual)
    if actual.shape != expected.shape:
        raise Mismatch(f"{where}: shape {list(actual.shape)}, expected "
                       f"{list(expected.shape)}", "shape")
    if expected.dtype == object or expected.dtype.kind in "SU":
        _assert_equal(actual.astype(object), expected, where)
        return False
    if is_float(expected.dtype) and is_float(actual.dtype):
        actual = actual.astype(expected.dtype)
    if actual.dtype != expected.dtype:
        raise Mismatch(f"{where}: dtype {actual.dtype}, expected {expected.dtype}", "dtype")
    if not is_float(expected.dtype):
        wide = np.int64 if is_ml_dtype(expected.dtype) else expected.dtype
        _assert_equal(actual.astype(wide), expected.astype(wide), where)
        return False
    return _assert_close(expected, actual, tolerance, where)


def _assert_equal(actual: np.ndarray, expected: np.ndarray, where: str) -> None:
    try:
        np.testing.assert_array_equal(actual, expected, err_msg=where)
    except AssertionError as exc:
        raise Mismatch(str(exc), "values") from None


def _assert_close(expected: np.ndarray, actual: np.ndarray, tolerance: Tolerance,
                  where: str) -> bool:
    """Elementwise: within ``atol + rtol |expected|`` (in the dtype, or float32 for
    ml_dtypes, which do not promote with Python numbers, as assert_allclose computes) or
    within the dtype's granted ULPs; NaN where NaN is expected, the same infinities."""
    dtype = expected.dtype
    wide = np.float32 if is_ml_dtype(dtype) else dtype
    close = np.isclose(actual.astype(wide), expected.astype(wide), rtol=tolerance.rtol,
                       atol=tolerance.atol, equal_nan=True)
    if close.all():
        return False
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    both_finite = np.isfinite(e) & np.isfinite(a)
    error = np.where(both_finite, np.abs(a - e), 0.0)
    ulps = tolerance.ulps(dtype)
    within_ulps = both_finite & (error <= ulps * spacing(e, dtype))
    if (close | within_ulps).all():
        return True
    if not (both_finite | close).all():
        bad = np.argwhere(~(both_finite | close))
        index = tuple(int(i) for i in bad[0])
        raise Mismatch(f"{where}: NaN or infinities differ at {len(bad)} of {e.size} "
                       f"elements, first at {list(index)}: {actual[index]!s} (actual), "
                       f"{expected[index]!s} (expected)", "nonfinite")
    failing = ~(close | within_ulps)
    scale = float(np.max(np.abs(e[both_finite]), initial=0.0))
    largest = float(error.max())
    max_ulp = largest / float(spacing(scale, dtype))
    allowed = tolerance.atol + tolerance.relative(dtype) * scale
    # the failing element furthest beyond its own allowance
    beyond = np.where(failing, error / (tolerance.atol + tolerance.rtol * np.abs(e)), -1.0)
    worst = np.unravel_index(int(np.argmax(beyond)), beyond.shape)
    granted = f" or {ulps} ULPs of {dtype.name}" if ulps else ""
    raise Mismatch(
        f"{where}: {int(failing.sum())} of {e.size} elements differ beyond the tolerance "
        f"(rtol={tolerance.rtol:g}, atol={tolerance.atol:g}{granted}), the worst at "
        f"{[int(i) for i in worst]}: {actual[worst]!s} (actual), {expected[worst]!s} "
        f"(expected); largest error {largest:.3g}, {max_ulp:.3g} ULPs of {dtype.name} at the "
        f"output's largest magnitude {scale:.3g}", "values", max_ulp=max_ulp,
        near_miss=largest / allowed)
