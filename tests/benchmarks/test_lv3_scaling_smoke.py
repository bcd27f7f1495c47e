"""benchmarks/lv3_scaling.py runs end to end under ``mpirun -np 2`` (started by itself
through ``mpi_fork``): ``--smoke`` trains a small MLP for a few paired rounds on 1 and
on 2 ranks and prints both rows, the per-phase breakdown and the efficiency; the
numbers are not asserted (timings belong to the benchmark)."""
import re
import sys

import pytest

from tests.lv3_distributed.mpi_helpers import run_program
from tests.benchmarks.run_time_line import says_expected_run_time_first


@pytest.mark.mpi
def test_smoke_run_prints_both_sides_and_the_efficiency(repo_root):
    script = repo_root / "benchmarks" / "lv3_scaling.py"
    status, out, _ = run_program([sys.executable, str(script), "--smoke"], timeout=300)
    assert status == 0, out[-3000:]
    assert says_expected_run_time_first(out), out[:1000]
    assert "== Weak scaling of ConsistentDecentralized(GradientDescent), 1 -> 2 ranks" in out
    for phase in ("data", "compute", "communication", "update", "other"):
        assert phase in out, phase
    assert re.search(r"^\s+1\s+\d+\.\d+ ms", out, re.MULTILINE), out
    assert re.search(r"^\s+2\s+\d+\.\d+ ms", out, re.MULTILINE), out
    assert re.search(r"weak-scaling efficiency t1/t2 = \d\.\d{3} \(median of 2 paired", out)
