"""Median confidence intervals (deep500.utils.statistics) against published ranks,
exact binomial coverage, the normal approximation and an empirical coverage check."""
import math

import numpy as np
import pytest

from deep500.utils import statistics
from deep500.utils.statistics import median_ci, median_ci_ranks, summarize


def exact_tail(n: int, k: int) -> float:
    """P(B <= k) for B ~ Binomial(n, 1/2), straight from the definition."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def exact_ranks(n: int, confidence: float = 0.95):
    """Largest j with 1 - 2 P(B <= j - 1) >= confidence, by brute force."""
    best = None
    for j in range(1, n // 2 + 1):
        if 1.0 - 2.0 * exact_tail(n, j - 1) >= confidence:
            best = j
        else:
            break
    return best


# Le Boudec, "Performance Evaluation of Computer and Communication Systems", Table A.1:
# 95% confidence interval of the median is [x_(j), x_(k)].
LE_BOUDEC_95 = {6: (1, 6), 10: (2, 9), 20: (6, 15), 30: (10, 21), 50: (18, 33),
                100: (40, 61)}


@pytest.mark.parametrize("n, ranks", sorted(LE_BOUDEC_95.items()))
def test_ranks_match_le_boudec_table(n, ranks):
    j, k, coverage = median_ci_ranks(n)
    assert (j, k) == ranks


@pytest.mark.parametrize("n", [6, 7, 10, 11, 20, 30, 50, 99, 100, 101, 257])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_coverage_is_exact_and_j_is_the_largest(n, confidence):
    result = median_ci_ranks(n, confidence)
    if result is None:
        # Even the widest interval [x_(1), x_(n)] misses the level.
        assert 1.0 - 2.0 * exact_tail(n, 0) < confidence
        return
    j, k, coverage = result
    assert k == n - j + 1
    assert 1 <= j < k <= n
    assert coverage == pytest.approx(1.0 - 2.0 * exact_tail(n, j - 1), rel=0, abs=1e-12)
    assert coverage >= confidence
    # One rank narrower would fall below the requested level.
    assert 1.0 - 2.0 * exact_tail(n, j) < confidence
    assert j == exact_ranks(n, confidence)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5])
def test_too_few_samples_give_none(n):
    assert median_ci_ranks(n) is None
    low, high, coverage = median_ci(np.arange(n, dtype=float))
    assert math.isnan(low) and math.isnan(high) and coverage == 0.0


def test_six_samples_is_the_smallest_95_percent_interval():
    # n = 5: the widest interval covers 1 - 2/32 = 0.9375 < 0.95; n = 6: 1 - 2/64.
    assert median_ci_ranks(6) == (1, 6, pytest.approx(1 - 2 / 64, abs=1e-15))


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.1, 1.5])
def test_invalid_confidence_raises(confidence):
    with pytest.raises(ValueError, match="confidence"):
        median_ci_ranks(20, confidence)


def test_exact_branch_is_fast_up_to_the_limit():
    import time
    start = time.perf_counter()
    j, k, coverage = median_ci_ranks(statistics._EXACT_LIMIT)
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"exact ranks for n=5000 took {elapsed:.1f} s"
    assert (j, k) == (2431, 2570)
    assert 0.95 <= coverage < 0.952


def _exact_ranks_integer(n, confidence=0.95):
    """Exact ranks and coverage for large n, with integer binomial sums."""
    best, below, comb, total = None, 0, 1, 1 << n
    for j in range(1, n // 2 + 1):
        below += comb
        coverage = 1.0 - (2 * below) / total
        if coverage < confidence:
            break
        best = (j, n - j + 1, coverage)
        comb = comb * (n - j + 1) // j
    return best


@pytest.mark.parametrize("n", [5001, 5002, 5003, 6000, 10007])
def test_normal_approximation_agrees_with_exact_ranks(n):
    assert n > statistics._EXACT_LIMIT
    j, k, coverage = median_ci_ranks(n)
    exact_j, exact_k, exact_coverage = _exact_ranks_integer(n)
    assert abs(j - exact_j) <= 1
    assert k == n - j + 1
    # The reported coverage is that of the chosen ranks (normal approximation).
    below, comb = 0, 1
    for i in range(j):  # below = sum_{i < j} C(n, i), incrementally
        below += comb
        comb = comb * (n - i) // (i + 1)
    true_coverage = 1.0 - (2 * below) / (1 << n)
    assert coverage == pytest.approx(true_coverage, abs=5e-4)
    assert true_coverage >= 0.95 - 5e-4


def test_branches_meet_at_the_limit():
    at_limit = median_ci_ranks(5000)
    past_limit = median_ci_ranks(5001)
    assert abs(at_limit[0] - past_limit[0]) <= 1
    assert abs(at_limit[1] - past_limit[1]) <= 2


def test_normal_quantile():
    assert statistics._normal_quantile(0.975) == pytest.approx(1.959963984540054, abs=1e-9)
    assert statistics._normal_quantile(0.5) == pytest.approx(0.0, abs=1e-12)


def test_median_ci_picks_order_statistics():
    samples = np.random.default_rng(0).permutation(np.arange(1.0, 21.0))  # 1..20 shuffled
    low, high, coverage = median_ci(samples)
    assert (low, high) == (6.0, 15.0)  # x_(6), x_(15) for n = 20
    assert coverage == pytest.approx(1.0 - 2.0 * exact_tail(20, 5), abs=1e-12)


def test_empirical_coverage_on_a_skewed_distribution():
    """The interval covers the true median of a lognormal in ~95% of trials or more.

    Median of lognormal(mu, sigma) is exp(mu). With n = 20 the exact coverage of
    [x_(6), x_(15)] is 0.9586; over 2000 trials the binomial standard error is
    sqrt(0.9586 * 0.0414 / 2000) = 0.0045, so +-0.02 is more than 4 standard errors.
    """
    rng = np.random.default_rng(12345)
    trials, n, mu, sigma = 2000, 20, 1.0, 1.5
    true_median = math.exp(mu)
    data = rng.lognormal(mu, sigma, size=(trials, n))
    covered = 0
    for row in data:
        low, high, _ = median_ci(row)
        covered += low <= true_median <= high
    rate = covered / trials
    expected = median_ci_ranks(n)[2]
    assert abs(rate - expected) <= 0.02, f"coverage {rate:.4f}, expected {expected:.4f}"
    assert rate >= 0.95 - 0.02


def test_summarize_fields():
    samples = [5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 7.0, 6.0, 8.0, 10.0]
    summary = summarize(samples)
    assert summary["n"] == 10
    assert summary["median"] == 5.5
    assert (summary["ci_low"], summary["ci_high"]) == (2.0, 9.0)  # x_(2), x_(9)
    assert summary["ci_confidence"] == pytest.approx(1 - 2 * 11 / 1024, abs=1e-12)
    assert summary["ci_relative_width"] == pytest.approx(7.0 / 5.5, rel=1e-12)
    assert summary["min"] == 1.0 and summary["max"] == 10.0
    assert summary["mean"] == 5.5
    assert summary["std"] == pytest.approx(np.std(samples, ddof=1), rel=1e-12)
    assert set(summary) == {"n", "median", "ci_low", "ci_high", "ci_confidence",
                            "ci_relative_width", "min", "max", "mean", "std"}


def test_summarize_small_and_empty():
    assert summarize([]) == {"n": 0}
    single = summarize([2.5])
    assert single["n"] == 1 and single["median"] == 2.5 and single["std"] == 0.0
    assert math.isnan(single["ci_low"]) and math.isnan(single["ci_relative_width"])
    assert single["ci_confidence"] == 0.0


def test_summarize_zero_median_has_nan_relative_width():
    summary = summarize([0.0] * 10)
    assert summary["median"] == 0.0 and summary["ci_low"] == 0.0
    assert math.isnan(summary["ci_relative_width"])
