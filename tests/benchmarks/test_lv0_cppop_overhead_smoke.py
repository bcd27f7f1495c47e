"""benchmarks/lv0_cppop_overhead.py runs end to end: ``--smoke`` compiles both kernels,
times every call path for a few rounds, prints the targets and the compile and load
times; the targets are not asserted (timings belong to the benchmark)."""
import os
import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_smoke_run_prints_every_table(repo_root):
    script = repo_root / "benchmarks" / "lv0_cppop_overhead.py"
    env = dict(os.environ)  # the session cache (tests/conftest.py): TF kernel built once
    # The timeout only guards against a hang; the run takes under a minute.
    result = subprocess.run([sys.executable, str(script), "--smoke"], cwd=repo_root, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for title in ("== elementwise (relu), 1,024 float32 elements ==",
                  "== reduction (sum), 65,536 float32 elements ==",
                  "== Targets (Deep500's default paths) ==", "== Not judged ==",
                  "== Compilation (fresh cache) and cache-hit load (fresh process) =="):
        assert title in out, out
    for variant in ("d5ref.custom_op", "d5pt.custom_op", "d5pt.custom_op (Python path)",
                    "d5tf.custom_op (eager)", "d5tf.custom_op (eager, Python path)",
                    "d5tf.custom_op (tf.function)"):
        assert variant in out
    assert "cold compile" in out and "cache-hit load median" in out
    # Every bridge's default path is judged at both sizes of both kernels.
    assert re.search(r"\b\d+ of 20 judged rows meet their target", out), out
    assert "TensorFlow's function-call cost" in out
