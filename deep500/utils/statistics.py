"""Summary statistics for repeated measurements.

The confidence interval of the median is nonparametric and rank based: with n samples
sorted ascending, the number of samples below the true median is Binomial(n, 1/2), so
[x_(j), x_(n-j+1)] covers the median with probability 1 - 2 P(B <= j-1). We pick the
largest j whose coverage is still at least the requested level (Le Boudec,
"Performance Evaluation of Computer and Communication Systems", 2010, Thm. 2.1; used
by Hoefler & Belli, "Scientific Benchmarking of Parallel Computing Systems", SC'15).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

# Exact binomial sums are cheap up to here; beyond it the normal approximation is exact
# to far below one rank.
_EXACT_LIMIT = 5000


def _binomial_half_cdf(n: int, k: int) -> float:
    """P(B <= k) for B ~ Binomial(n, 1/2), exactly (big integers)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(k + 1)) / (1 << n)


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float] | None:
    """1-based ranks (j, k) of the median's confidence interval and its exact coverage
    (for n above 5000, ranks and coverage from the normal approximation).

    Returns None when n is too small for any interval to reach ``confidence`` (for 95%,
    n < 6).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = 1.0 - confidence
    if n < 1:
        return None
    if n > _EXACT_LIMIT:
        z = _normal_quantile(1.0 - alpha / 2.0)
        j = int(math.floor((n - z * math.sqrt(n)) / 2.0))
        j = max(j, 1)
        # P(B <= j - 1) by the normal approximation with continuity correction.
        tail = 0.5 * (1.0 + math.erf((j - 0.5 - n / 2.0) / (math.sqrt(n) / 2.0)
                                     / math.sqrt(2.0)))
        return j, n - j + 1, 1.0 - 2.0 * tail
    # Exact, in integers: below = sum_{i < j} C(n, i) is 2^n P(B <= j - 1), the number of
    # outcomes with at most j - 1 samples strictly below x_(j). One big-integer update
    # per rank keeps n = 5000 at a few milliseconds.
    best = None
    total = 1 << n
    below = 0
    comb = 1  # C(n, j - 1)
    for j in range(1, n // 2 + 1):
        below += comb
        coverage = 1.0 - (2 * below) / total
        if coverage < confidence:
            break
        best = (j, n - j + 1, coverage)
        comb = comb * (n - j + 1) // j
    return best


def _normal_quantile(p: float) -> float:
    """Inverse standard normal CDF by bisection on math.erf (only used for huge n)."""
    lo, hi = -10.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def median_ci(samples: Sequence[float], confidence: float = 0.95):
    """(low, high, achieved coverage) of the median, or (nan, nan, 0) if n is too small."""
    ordered = np.sort(np.asarray(samples, dtype=np.float64))
    ranks = median_ci_ranks(len(ordered), confidence)
    if ranks is None:
        return math.nan, math.nan, 0.0
    j, k, coverage = ranks
    return float(ordered[j - 1]), float(ordered[k - 1]), float(coverage)


def summarize(samples: Sequence[float], confidence: float = 0.95) -> dict:
    """Median with its nonparametric CI, min, max, mean, standard deviation, count."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        return {"n": 0}
    median = float(np.median(values))
    low, high, coverage = median_ci(values, confidence)
    return {
        "n": int(values.size),
        "median": median,
        "ci_low": low,
        "ci_high": high,
        "ci_confidence": coverage,
        "ci_relative_width": (high - low) / median if median and not math.isnan(low) else math.nan,
        "min": float(values.min()),
        "max": float(values.max()),
        "mean": float(values.mean()),
        "std": float(values.std(ddof=1)) if values.size > 1 else 0.0,
    }
