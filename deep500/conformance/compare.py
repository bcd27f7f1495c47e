"""Comparing an executor's outputs with a case's expected ones, as ONNX's backend test
runner does (``numpy.testing.assert_allclose``, rtol=1e-3, atol=1e-7, NaN where NaN is
expected; integer, boolean and string outputs exactly)."""
from __future__ import annotations

import numpy as np

from deep500.conformance.cases import DEFAULT_ATOL, DEFAULT_RTOL


def compare_outputs(expected: list, outputs: dict, names: list[str], rtol: float = DEFAULT_RTOL,
                    atol: float = DEFAULT_ATOL) -> None:
    """Raise ``AssertionError`` unless ``outputs[names[i]]`` matches ``expected[i]``."""
    if len(expected) != len(names):
        raise AssertionError(f"the test has {len(expected)} expected outputs for the "
                             f"graph's {len(names)} outputs {names}")
    for name, value in zip(names, expected):
        if name not in outputs:
            raise AssertionError(f"no output {name!r} (returned: {sorted(outputs)})")
        assert_similar(value, outputs[name], rtol, atol, where=f"output {name!r}")


def assert_similar(expected, actual, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                   where: str = "output") -> None:
    """Compare one value (a tensor, a sequence of tensors, or None) with its expected
    value."""
    if expected is None:
        if actual is not None:
            raise AssertionError(f"{where}: expected an empty optional, got "
                                 f"{type(actual).__name__}")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            raise AssertionError(f"{where}: expected a sequence of {len(expected)} tensors, "
                                 f"got {type(actual).__name__}")
        if len(actual) != len(expected):
            raise AssertionError(f"{where}: expected a sequence of {len(expected)} tensors, "
                                 f"got {len(actual)}")
        for index, (e, a) in enumerate(zip(expected, actual)):
            assert_similar(e, a, rtol, atol, where=f"{where}[{index}]")
        return
    if actual is None or isinstance(actual, (list, tuple)):
        raise AssertionError(f"{where}: expected a tensor, got {type(actual).__name__}")
    expected, actual = np.asarray(expected), np.asarray(actual)
    if actual.shape != expected.shape:
        raise AssertionError(f"{where}: shape {list(actual.shape)}, expected "
                             f"{list(expected.shape)}")
    if expected.dtype == object or expected.dtype.kind in "SU":
        np.testing.assert_array_equal(actual.astype(object), expected, err_msg=where)
        return
    if _is_float(expected.dtype) and _is_float(actual.dtype):
        actual = actual.astype(expected.dtype)
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{where}: dtype {actual.dtype}, expected {expected.dtype}")
    if _is_ml_dtype(expected.dtype):
        # ml_dtypes (bfloat16, float8, int4, ...) do not promote with Python numbers
        wide = np.float32 if _is_float(expected.dtype) else np.int64
        expected, actual = expected.astype(wide), actual.astype(wide)
        if expected.dtype.name == "bfloat16":
            rtol = max(rtol, 2 ** -6)
    if np.issubdtype(expected.dtype, np.inexact):
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=where)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=where)


def _is_ml_dtype(dtype: np.dtype) -> bool:
    return dtype.type.__module__.startswith("ml_dtypes")


def _is_float(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or (
        _is_ml_dtype(dtype) and dtype.name.startswith(("bfloat", "float")))
