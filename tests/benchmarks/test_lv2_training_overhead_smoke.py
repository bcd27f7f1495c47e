"""benchmarks/lv2_training_overhead.py runs end to end: ``--smoke`` trains one tiny
epoch per side (after the agreement checks), measures the fixed cost per step, times
the Adam updates and prints both tables; the targets are not asserted (timings belong
to the benchmark)."""
import os
import subprocess
import sys

import pytest
from tests.benchmarks.run_time_line import says_expected_run_time_first

pytest.importorskip("torch")

TITLES = ("One training epoch: native PyTorch loop vs Deep500 (d5pt.from_onnx + d5pt "
          "optimizer + ShuffleSampler)",
          "Adam update over all parameters: torch.optim.Adam.step() vs reference "
          "AdamOptimizer.update_rule")


@pytest.mark.slow
def test_smoke_run_prints_both_tables(repo_root):
    script = repo_root / "benchmarks" / "lv2_training_overhead.py"
    # The timeout only guards against a hang; the run takes a few seconds.
    result = subprocess.run([sys.executable, str(script), "--smoke"], cwd=repo_root,
                            env=dict(os.environ), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert says_expected_run_time_first(out), out[:1000]
    assert "torch " in out and "load average at start" in out
    for title in TITLES:
        assert f"== {title} ==" in out, out
    assert out.count("IQR of rounds") == len(TITLES)
    for case in ("momentum, same module", "momentum, hand-written", "adam, same module",
                 "adam, hand-written", "momentum, native vs native",
                 "torch default (for-loop)", "torch foreach=True"):
        assert out.count(f"lenet     {case} ") == 1, out
    assert out.count("mlp-tiny  momentum, same module ") == 1, out
    assert "Deep500's fixed cost per step" in out
    assert "Targets: " in out
