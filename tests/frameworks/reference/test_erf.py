"""The vectorized erf the reference Erf and Gelu use: SciPy's when it is installed, and
the piecewise Taylor form without it, both against the C library's ``math.erf``."""
import math

import numpy as np
import pytest

from deep500.frameworks.reference.operators import _op_common_erf as common

POINTS = np.concatenate([np.linspace(-7.0, 7.0, 20001), [0.0, -0.0, 1e-300, -1e-20,
                                                         0.0624, 0.0626, 5.999, 6.0]])


@pytest.mark.parametrize("path", ["erf", "_taylor_erf"])
def test_erf_is_within_a_few_ulp_of_math_erf(path):
    got = getattr(common, path)(POINTS)
    want = np.array([math.erf(v) for v in POINTS])
    # double-precision erf: a few units in the last place (|erf| <= 1, so 4 * eps
    # relative to max(|erf|, tiny))
    error = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(float).tiny)
    assert error.max() <= 4 * np.finfo(float).eps, POINTS[np.argmax(error)]
    assert np.signbit(getattr(common, path)(np.array([-0.0])))[0]


@pytest.mark.parametrize("path", ["erf", "_taylor_erf"])
def test_erf_special_values(path):
    got = getattr(common, path)(np.array([np.inf, -np.inf, np.nan, 40.0]))
    assert got[0] == 1.0 and got[1] == -1.0 and np.isnan(got[2]) and got[3] == 1.0


POINTS_32 = np.concatenate([np.linspace(-6.0, 6.0, 200001), np.logspace(-44, 0.7, 5000),
                            -np.logspace(-44, 0.7, 5000), [3.92, 3.999, 4.0, 4.001, 4.2, 4.3]]
                           ).astype(np.float32)


def test_float32_erf_is_within_four_eps_of_erf():
    got = common.erf_float32(POINTS_32)
    assert got.dtype == np.float32
    want = np.array([math.erf(v) for v in POINTS_32.astype(np.float64)])
    # float32 evaluation of the rational form: a few roundings of eps(float32)/2 each
    # (module docstring); relative to max(|erf|, the smallest normal float32)
    error = np.abs(got.astype(np.float64) - want) / np.maximum(
        np.abs(want), np.finfo(np.float32).tiny)
    assert error.max() <= 4 * np.finfo(np.float32).eps, POINTS_32[np.argmax(error)]
    assert np.abs(got).max() <= 1.0


def test_float32_erf_special_values():
    got = common.erf_float32(np.array([np.inf, -np.inf, np.nan, 40.0, -0.0], np.float32))
    assert got[0] == 1.0 and got[1] == -1.0 and np.isnan(got[2]) and got[3] == 1.0
    assert got[4] == 0.0 and np.signbit(got[4])


def test_float32_tanh_form_itself_is_within_half_an_eps32():
    # The float32 coefficients evaluated in float64: the approximation error alone (module
    # docstring: 5.2e-8 relative), apart from the round-off of evaluating in float32.
    x = np.linspace(1e-6, float(common._LIMIT_32), 100001)
    t = x * x
    p = np.polyval([float(c) for c in common._P_32[::-1]], t)
    q = np.polyval([float(c) for c in common._Q_32[::-1]], t)
    want = np.array([math.erf(v) for v in x])
    assert (np.abs(np.tanh(x * p / q) - want) / want).max() <= 0.5 * np.finfo(np.float32).eps
