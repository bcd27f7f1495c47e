"""benchmarks/lv3_allreduce.py runs end to end under ``mpirun -np 2``: ``--smoke``
checks every variant's result against NumPy, times three sizes up to 1 MB and prints
the table, the target line and the counting cost; the targets are not asserted
(timings belong to the benchmark)."""
import pytest

from tests.lv3_distributed.mpi_helpers import mpirun


@pytest.mark.mpi
@pytest.mark.slow
def test_smoke_run_prints_the_table_and_targets(repo_root):
    script = repo_root / "benchmarks" / "lv3_allreduce.py"
    # only guards against a hang: the run takes a few seconds
    status, out, _ = mpirun(2, script, "--smoke", timeout=300)
    assert status == 0, out[-3000:]
    assert "== Allreduce, 2 ranks: ratio = variant / raw mpi4py Allreduce" in out, out
    for size in ("1 KB", "64 KB", "1 MB"):
        for variant in ("mpi4py", "d5 ring", "d5 mpi"):
            assert f"{size:>7} {variant:<8}" in out, (size, variant, out)
    assert ("gloo skipped:" in out) or (" 1 MB gloo" in out)
    assert "== Targets ==" in out
    assert "default allreduce (d5 " in out and "/ mpi4py at 1 MB:" in out
    assert "counting cost:" in out
