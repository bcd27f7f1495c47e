"""A vectorized erf, accurate to double precision, for the operators that need the Gaussian
CDF (Gelu; Erf may share it). NumPy has no erf and calling ``math.erf`` per element costs
~0.4 µs, which made Gelu thirty times slower than its tanh form.

Method: piecewise Taylor polynomials. [0, 6) is cut into intervals of width 1/16; on each,
erf is expanded to degree 9 around the interval's centre, with the derivatives in closed
form, erf⁽ⁿ⁾(x) = (2/√π)·(-1)ⁿ⁻¹·Hₙ₋₁(x)·e^(-x²) (Hₙ the physicists' Hermite
polynomials; Abramowitz & Stegun 7.1.19), and erf(centre) from ``math.erf``. The
remainder is below |erf⁽¹⁰⁾|·(1/32)¹⁰/10! < 1e-17. Near 0 the Maclaurin series
erf(x) = (2/√π) Σ (-1)ⁿ x²ⁿ⁺¹ / (n!(2n+1)) keeps the relative accuracy of tiny
arguments, and erf(x) rounds to 1 in double precision from x = 6 on.
"""
import math

import numpy as np

_STEP = 1 / 16
_LIMIT = 6.0
_DEGREE = 9
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def _taylor_table() -> np.ndarray:
    """coefficients[i, n]: the n-th Taylor coefficient of erf around interval i's centre."""
    centres = (np.arange(int(_LIMIT / _STEP)) + 0.5) * _STEP
    table = np.empty((centres.size, _DEGREE + 1))
    table[:, 0] = [math.erf(c) for c in centres]
    gauss = _TWO_OVER_SQRT_PI * np.exp(-centres * centres)
    hermite_prev, hermite = np.zeros_like(centres), np.ones_like(centres)  # H₋₁, H₀
    for n in range(1, _DEGREE + 1):
        # erf⁽ⁿ⁾ / n! with H_{n-1}; then advance H_n = 2x·H_{n-1} - 2(n-1)·H_{n-2}
        table[:, n] = (-1) ** (n - 1) * hermite * gauss / math.factorial(n)
        hermite_prev, hermite = hermite, 2 * centres * hermite - 2 * (n - 1) * hermite_prev
    return table


_TABLE = _taylor_table()
_COLUMNS = [np.ascontiguousarray(_TABLE[:, n]) for n in range(_DEGREE + 1)]
_CENTRES = (np.arange(_TABLE.shape[0]) + 0.5) * _STEP
try:
    from scipy.special import erf as _scipy_erf
except ImportError:  # SciPy is optional: the Taylor form serves without it
    _scipy_erf = None
_MACLAURIN = [(-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(8)]


def erf(x) -> np.ndarray:
    """erf(x), elementwise, computed in float64: SciPy's ``scipy.special.erf`` (Cephes,
    about 3x faster) when SciPy is installed, else the piecewise Taylor form below. Both
    are within 2 ulp of ``math.erf``."""
    x = np.asarray(x, dtype=np.float64)
    if _scipy_erf is not None:
        return _scipy_erf(x)
    return _taylor_erf(x)


def _taylor_erf(x: np.ndarray) -> np.ndarray:
    """erf(x) of a float64 array by the piecewise Taylor polynomials (module docstring)."""
    t = np.abs(x)
    # NaN and inf get index 0 (and a zero offset): their results are replaced below
    index = np.minimum(np.where(t < _LIMIT, t, 0.0) * (1 / _STEP),
                       len(_CENTRES) - 1).astype(np.intp)
    d = np.where(t < _LIMIT, t - _CENTRES[index], 0.0)
    # Horner in place: ten gathers from a 96-entry (cache-resident) table
    result = np.take(_COLUMNS[_DEGREE], index)
    coefficient = np.empty_like(result)
    for n in range(_DEGREE - 1, -1, -1):
        np.multiply(result, d, out=result)
        np.add(result, np.take(_COLUMNS[n], index, out=coefficient), out=result)
    small = t < _STEP
    if np.any(small):
        s = t[small]
        s2 = s * s
        series = np.full_like(s, _MACLAURIN[-1])
        for c in reversed(_MACLAURIN[:-1]):
            series = series * s2 + c
        result[small] = _TWO_OVER_SQRT_PI * s * series
    result = np.where(t >= _LIMIT, 1.0, result)
    result = np.where(np.isnan(t), np.nan, result)
    return np.copysign(result, x)
