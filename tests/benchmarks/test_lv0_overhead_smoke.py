"""benchmarks/lv0_overhead.py's telemetry-sampler rows run end to end (six short rounds
each, the fewest with a 95% CI) and print a verdict; the cost itself is not asserted
(timings belong to the benchmark)."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")


@pytest.mark.slow
def test_sampler_rows_run(repo_root):
    script = repo_root / "benchmarks" / "lv0_overhead.py"
    result = subprocess.run([sys.executable, str(script), "--only-sampler",
                             "--sampler-rounds", "6", "--sampler-round-seconds", "0.01"],
                            cwd=repo_root, env=dict(os.environ), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "Telemetry sampler (every 50 ms) on vs off, 6 paired rounds" in out
    for row in ("Python loop, ~1 ms (holds the GIL)", "torch.mm "):
        line = next(l for l in out.splitlines() if l.startswith(row))
        assert re.search(r"[+-]\d+\.\d\d% \[[+-]\d+\.\d\d%, [+-]\d+\.\d\d%\] "
                         r"(MET|NOT MET|UNRESOLVED)$", line), line
    assert re.search(r"^sampler cost .*CI\): (MET|NOT MET|UNRESOLVED)"
                     r"( \(the CI straddles .*\))?$", out, re.M)
