"""deep500 compare: the Hodges–Lehmann ratio and its Moses/Mann–Whitney interval, the
matching of configurations, --fail-above, --json, and deep500 run --baseline."""
import itertools
import json
import math

import numpy as np
import pytest

from deep500.cli import main
from deep500.store import Database, StoreError, store_run
from deep500.store.compare import (kth_difference, load_run,
                                   mann_whitney_counts, moses_rank, parse_threshold,
                                   ratio_interval)

from .conftest import lognormal, measurement, scaled_copy, write_run

N = 60  # samples per side; see the tests for what it buys


def test_mann_whitney_law_by_enumeration():
    """The exact law of U against brute-force enumeration of every arrangement."""
    for m, n in ((1, 1), (2, 3), (3, 4), (4, 4), (5, 3)):
        counts = [0] * (m * n + 1)
        for positions in itertools.combinations(range(m + n), m):  # ranks of the x's
            # U = #{(i, j): y_j < x_i}: x at position p beats the p - (its index) y's
            counts[sum(p - i for i, p in enumerate(positions))] += 1
        assert mann_whitney_counts(m, n) == counts
        assert sum(counts) == math.comb(m + n, m)


def test_moses_rank_matches_the_tables():
    # Hollander & Wolfe's C_alpha for a 95% interval: m = n = 5 -> 3, m = n = 10 -> 24
    assert moses_rank(5, 5)[:1] == (3,) and moses_rank(5, 5)[1] == pytest.approx(1 - 8 / 252)
    assert moses_rank(10, 10)[0] == 24
    assert moses_rank(3, 3) is None  # P(U = 0) = 1/20 > 2.5%: no 95% interval
    exact, normal = moses_rank(120, 120), moses_rank(130, 130)
    assert exact[2] == "exact" and normal[2] == "normal"
    assert abs(exact[1] - 0.95) < 0.002 and abs(normal[1] - 0.95) < 0.002


def test_kth_difference_without_forming_all_differences():
    rng = np.random.default_rng(5)
    for _ in range(10):
        x = np.sort(rng.normal(size=rng.integers(1, 80)))
        y = np.sort(rng.lognormal(size=rng.integers(1, 80)))
        differences = np.sort((y[None, :] - x[:, None]).ravel())
        for k in {1, 2, differences.size // 2, differences.size}:
            assert kth_difference(x, y, k) == differences[k - 1]


def test_a_ten_percent_slowdown_is_found():
    """B = A's distribution × 1.10 (independent draws, 5% log-normal noise); with
    n = 60 a side the shift's standard error is ~0.0093 in log, so 1.05 is five
    standard errors below the estimate and 1.20 nine above."""
    a, b = lognormal(1, N), 1.10 * lognormal(2, N)
    result = ratio_interval(a, b)
    assert result["ci_low"] <= 1.10 <= result["ci_high"]
    assert result["ratio"] == pytest.approx(1.10, rel=0.03)
    assert result["ci_low"] > 1.0 and result["method"] == "exact"
    assert result["coverage"] >= 0.95


def test_identical_distributions_are_not_significant():
    """A/A at 99.9% confidence: for any seed, a false positive has probability at most
    0.1% (the interval is exact); these seeds are fixed."""
    result = ratio_interval(lognormal(3, N), lognormal(4, N), confidence=0.999)
    assert result["ci_low"] <= 1.0 <= result["ci_high"]
    assert result["ratio"] == pytest.approx(1.0, abs=0.03)


def test_interval_coverage():
    """Over 1000 seeded trials the 95% interval covers the true ratio about as often as
    its exact coverage says (within four binomial standard deviations, ~0.028)."""
    rng = np.random.default_rng(11)
    m, n, truth = 15, 12, 1.3
    covered = 0
    for _ in range(1000):
        a = rng.lognormal(0.0, 0.3, m)
        b = truth * rng.lognormal(0.0, 0.3, n)
        result = ratio_interval(a, b)
        covered += result["ci_low"] <= truth <= result["ci_high"]
    coverage = moses_rank(m, n)[1]
    assert abs(covered / 1000 - coverage) <= 4 * math.sqrt(coverage * (1 - coverage) / 1000)


def test_too_few_samples_have_no_interval():
    result = ratio_interval([1.0, 1.1, 1.2], [2.0, 2.1, 2.2])
    assert result["ci_low"] is None and result["ratio"] == pytest.approx(2.1 / 1.1, rel=0.05)
    with pytest.raises(StoreError):
        ratio_interval([], [1.0])


def test_thresholds():
    assert parse_threshold("5%") == pytest.approx(0.05)
    assert parse_threshold("0.05") == pytest.approx(0.05)
    for bad in ("5", "-1%", "x", "0"):
        with pytest.raises(StoreError):
            parse_threshold(bad)


@pytest.fixture
def slowdown(tmp_path):
    """Run A; run B with Relu 10% slower, Softmax unchanged, Gemm only in A and Conv
    only in B."""
    a = write_run(tmp_path / "a", [measurement("Relu", lognormal(1, N), 0),
                                   measurement("Softmax", lognormal(2, N, 5e-3), 1),
                                   measurement("Gemm", lognormal(3, N), 2)])
    b = write_run(tmp_path / "b", [measurement("Relu", 1.10 * lognormal(4, N), 0),
                                   measurement("Softmax", lognormal(5, N, 5e-3), 1),
                                   measurement("Conv", lognormal(6, N), 2)],
                  revision="b" * 40, started="2026-01-02T00:00:00+00:00")
    return a, b


def test_compare_table_and_exit_status(slowdown, capsys):
    a, b = slowdown
    assert main(["compare", a, b, "--fail-above", "5%"]) == 1
    out = capsys.readouterr().out
    relu = next(line for line in out.splitlines() if line.startswith("Relu"))
    assert "slower > 5%: FAIL" in relu
    softmax = next(line for line in out.splitlines() if line.startswith("Softmax"))
    assert softmax.rstrip().endswith("same")
    assert "only in A (1): Gemm" in out and "only in B (1): Conv" in out
    assert main(["compare", a, b, "--fail-above", "20%"]) == 0
    assert main(["compare", a, b, "--fail-above", "0.05"]) == 1
    assert main(["compare", a, b]) == 0  # without a threshold, a slowdown is only shown
    assert main(["compare", b, a, "--fail-above", "5%"]) == 0  # faster is no failure
    assert "faster" in capsys.readouterr().out


def test_compare_json_and_run_ids(slowdown, tmp_path, capsys):
    a, b = slowdown
    db_path = str(tmp_path / "d.db")
    ids = [store_run(a, db_path), store_run(b, db_path)]
    assert main(["compare", str(ids[0]), "-1", "--db", db_path, "--json",
                 "--fail-above", "5%"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["a"]["run_id"] == ids[0] and report["b"]["run_id"] == ids[1]
    rows = {r["label"]: r for r in report["rows"]}
    assert set(rows) == {"Relu", "Softmax"}
    assert rows["Relu"]["verdict"] == "slower" and rows["Relu"]["fails"]
    assert rows["Relu"]["ci_low"] <= 1.10 <= rows["Relu"]["ci_high"]
    assert rows["Softmax"]["verdict"] == "same" and not rows["Softmax"]["fails"]
    assert report["only_a"] == ["Gemm"] and report["only_b"] == ["Conv"]
    assert report["failed"] is True
    assert main(["compare", "99", "1", "--db", db_path]) == 2
    assert "no run with id 99" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nothing"), a]) == 2
    assert "neither a run folder nor a run id" in capsys.readouterr().err


def test_configurations_match_on_settings_and_rank(tmp_path):
    """Equal labels with different settings, or another rank, are different
    configurations."""
    a = write_run(tmp_path / "a", [measurement("Relu", lognormal(1, 20), threads=1),
                                   measurement("Relu", lognormal(2, 20), rank=1, threads=1)])
    b = write_run(tmp_path / "b", [measurement("Relu", lognormal(3, 20), threads=2),
                                   measurement("Relu", lognormal(4, 20), rank=1, threads=1)])
    from deep500.store.compare import compare_runs
    comparison = compare_runs(load_run(a), load_run(b))
    assert [(r["label"], r["rank"]) for r in comparison.rows] == [("Relu [rank 1]", 1)]
    assert comparison.only_a == ["Relu [rank 0]"] and comparison.only_b == ["Relu [rank 0]"]


def test_run_with_a_baseline(real_run, tiny_recipe, tmp_path, capsys):
    """deep500 run --baseline: a baseline 1000x faster than anything this machine
    measures makes every configuration significantly slower (exit 1 with
    --fail-above); one 1000x slower makes it faster (exit 0), whatever the noise."""
    fast = scaled_copy(real_run, str(tmp_path / "fast"), 1e-3)
    slow = scaled_copy(real_run, str(tmp_path / "slow"), 1e3)
    db_path = str(tmp_path / "d.db")
    status = main(["run", tiny_recipe, "--out", str(tmp_path / "r1"), "--quiet", "--db",
                   db_path, "--baseline", fast, "--fail-above", "5%"])
    out = capsys.readouterr().out
    assert "Baseline " + fast + " (recipe 'storetiny'): 2 of the 2 configurations" in out
    # a row measured under interference (this machine may be busy) is not judged
    judged = 2 - _interfered_rows(fast, str(tmp_path / "r1"))
    assert status == (1 if judged else 3)
    assert "Compared with the baseline" in out and out.count("slower > 5%: FAIL") == judged
    store_run(slow, db_path)
    slow_id = [r["id"] for r in Database(db_path).runs() if r["folder"].endswith("slow")][0]
    status = main(["run", tiny_recipe, "--out", str(tmp_path / "r2"), "--quiet", "--db",
                   db_path, "--baseline", str(slow_id), "--fail-above", "5%"])
    assert status == (0 if _interfered_rows(slow, str(tmp_path / "r2")) == 0 else 3)
    assert capsys.readouterr().out.count("faster") >= 2
    assert len(Database(db_path).runs()) == 3  # both runs stored, and the baseline


def _interfered_rows(a: str, b: str) -> int:
    """Configurations measured under interference in run folder ``a`` or ``b``."""
    runs = [load_run(a).measurements, load_run(b).measurements]
    return sum(runs[0][key]["interfered"] or runs[1][key]["interfered"] for key in runs[0])


def test_zero_times_are_left_out(tmp_path):
    """A time of 0 (below the timer's resolution) has no logarithm: left out, and a
    side with no positive time has no ratio."""
    from deep500.store.compare import compare_runs
    a = write_run(tmp_path / "a", [measurement("Zero", [0.0] * 10, 0),
                                   measurement("Some", [0.0] + list(lognormal(1, 20)), 1)])
    b = write_run(tmp_path / "b", [measurement("Zero", lognormal(2, 10), 0),
                                   measurement("Some", lognormal(3, 20), 1)])
    rows = {r["label"]: r for r in compare_runs(load_run(a), load_run(b)).rows}
    assert rows["Zero"]["ratio"] is None and rows["Zero"]["verdict"] == "too few samples"
    assert rows["Some"]["n_a"] == 20 and rows["Some"]["verdict"] == "same"


def test_a_row_measured_under_interference_says_so(tmp_path, capsys):
    """A difference measured while other processes used the CPU may be theirs: the row
    says on which side (the sampler's flag, ``telemetry.interfered``)."""
    busy = measurement("Relu", lognormal(2, N))
    busy["telemetry"] = {"interfered": True, "reason": "other processes used 1.7 cores"}
    a = write_run(tmp_path / "a", [measurement("Relu", lognormal(1, N))])
    b = write_run(tmp_path / "b", [busy], started="2026-01-02T00:00:00+00:00")
    assert main(["compare", a, b]) == 0
    relu = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("Relu"))
    assert relu.rstrip().endswith("(⚠ interference in B)")
    assert main(["compare", a, b, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["interfered"] == ["B"]
