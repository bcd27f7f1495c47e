"""benchmarks/lv1_layer_models.py runs end to end: ``--smoke`` profiles MLP and LeNet
on the reference executor, fits both per-layer models leave-one-model-out and prints
their errors and, last, the summary line."""
import re
import subprocess
import sys

import pytest

from tests.benchmarks.run_time_line import says_expected_run_time_first

pytest.importorskip("sklearn")


def test_smoke_run_prints_errors_and_last_line(repo_root):
    script = repo_root / "benchmarks" / "lv1_layer_models.py"
    # The timeout only guards against a hang; the run takes ~3 s.
    result = subprocess.run([sys.executable, str(script), "--smoke"], cwd=repo_root,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert says_expected_run_time_first(out), out[:1000]
    for label in ("mlp (batch 2) on reference", "lenet (batch 2) on reference"):
        assert label in out
    assert len(re.findall(r"worst (analytic|learned) (forward|backward): \S+", out)) == 8
    last = out.strip().splitlines()[-1]
    match = re.fullmatch(r"per-layer model weighted error: analytic ([\d.]+)%, "
                         r"learned ([\d.]+)%", last)
    assert match, last
    # Errors are fractions of measured time: finite and non-negative.
    assert all(0.0 <= float(v) < 1e4 for v in match.groups())
