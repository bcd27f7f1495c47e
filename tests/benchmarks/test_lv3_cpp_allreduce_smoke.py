"""benchmarks/lv3_cpp_allreduce.py runs end to end under ``mpirun -np 2``: ``--smoke``
builds the C++ MPI operators for three sizes up to 1 MB (into this session's
``$DEEP500_CACHE``), checks every variant's result against NumPy, times them and prints
the table and the summary; the timings are not asserted (they belong to the
benchmark)."""
import pytest

from tests.lv3_distributed.mpi_helpers import mpirun
from tests.benchmarks.run_time_line import says_expected_run_time_first


@pytest.mark.mpi
@pytest.mark.slow
def test_smoke_run_prints_the_table(repo_root):
    script = repo_root / "benchmarks" / "lv3_cpp_allreduce.py"
    # only guards against a hang: six operator builds and the run take ~30 s
    status, out, _ = mpirun(2, script, "--smoke", timeout=400)
    assert status == 0, out[-3000:]
    assert says_expected_run_time_first(out), out[:1000]
    assert "== Gradient exchange per step, 2 ranks: ratio = variant / d5 ring" in out, out
    for size in ("1 KB", "64 KB", "1 MB"):
        for variant in ("d5 ring", "d5 mpi", "cpp mpi", "cpp topk"):
            assert f"{size:>7} {variant:<9}" in out, (size, variant, out)
    assert "  k=3" in out and "  k=2622" in out  # ceil(0.01 n) of 256 and 262144 floats
    assert "== Summary: ratio to d5 ring" in out
    assert "operator builds or cache lookups:" in out
