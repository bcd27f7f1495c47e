"""benchmarks/benchmark_targets.py: the verdicts every benchmark records, --check's exit
status (1 on any NOT MET target, UNRESOLVED no failure) and the expected-run-time line;
and a real benchmark run with --check whose exit status follows its printed verdict."""
import io
import os
import re
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks")
sys.path.insert(0, BENCHMARKS)
from benchmark_targets import (Targets, add_check_option, expected_run_time,  # noqa: E402
                               format_duration)


def test_check_fails_on_a_target_not_met():
    targets = Targets()
    assert targets.judge("a", True) == "MET" and targets.judge("b", None) == "-"
    assert targets.record("c", "UNRESOLVED") == "UNRESOLVED"
    out = io.StringIO()
    assert targets.exit_status(check=True, out=out) == 0
    assert "2 targets judged, 0 NOT MET, 1 UNRESOLVED" in out.getvalue()
    assert targets.judge("d slow", False) == "NOT MET"
    assert targets.exit_status(check=False) == 0  # without --check: verdicts only
    out = io.StringIO()
    assert targets.exit_status(check=True, out=out) == 1
    assert out.getvalue().endswith("3 targets judged, 1 NOT MET, 1 UNRESOLVED: d slow\n")
    assert targets.exit_status(check=True, status=2) == 2  # an error stays an error
    with pytest.raises(ValueError):
        targets.record("e", "PASS")


def test_expected_run_time_line():
    assert [format_duration(s) for s in (45, 210, 7200)] == ["45 s", "3.5 min", "2.0 h"]
    out = io.StringIO()
    expected_run_time(600, "20 rounds", at_most=900, out=out)
    assert out.getvalue() == "Expected run time: about 10.0 min, at most 15.0 min " \
                             "(20 rounds)\n"


def test_check_option():
    import argparse
    parser = argparse.ArgumentParser()
    add_check_option(parser)
    assert parser.parse_args(["--check"]).check and not parser.parse_args([]).check


@pytest.mark.slow
def test_a_benchmark_with_check_exits_as_its_verdict_says(repo_root):
    """lv0_overhead's sampler rows (six short rounds): the first line is the expected
    run time, and with --check the exit status is 1 exactly when the verdict printed is
    NOT MET (the verdict itself belongs to the benchmark)."""
    script = repo_root / "benchmarks" / "lv0_overhead.py"
    result = subprocess.run([sys.executable, str(script), "--only-sampler", "--check",
                             "--sampler-rounds", "6", "--sampler-round-seconds", "0.01"],
                            cwd=repo_root, env=dict(os.environ), capture_output=True,
                            text=True, timeout=300)
    out = result.stdout
    assert out.splitlines()[0].startswith("Expected run time: about "), out
    verdict = re.search(r"^sampler cost .*CI\): (MET|NOT MET|UNRESOLVED)", out, re.M)[1]
    assert result.returncode == (1 if verdict == "NOT MET" else 0), out + result.stderr
    # the verdict line goes to stderr: the benchmark's own last line stays last
    assert re.search(r"^--check: 1 targets judged, (0|1) NOT MET", result.stderr,
                     re.M), result.stderr
    assert "--check" not in out
