"""benchmarks/lv3_cpp_allreduce.py runs end to end under ``mpirun -np 2``: ``--smoke``
builds the C++ MPI operators for three sizes up to 1 MB (into this session's
``$DEEP500_CACHE``), checks every variant's result against NumPy, times them and prints
the table and the summary; the timings are not asserted (they belong to the
benchmark)."""
import os
import signal
import subprocess
import sys

import pytest

from deep500.lv3_distributed import mpirun_executable


@pytest.mark.mpi
@pytest.mark.slow
def test_smoke_run_prints_the_table(repo_root):
    script = repo_root / "benchmarks" / "lv3_cpp_allreduce.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_"))}
    process = subprocess.Popen([mpirun_executable(), "-np", "2", sys.executable, str(script),
                                "--smoke"], cwd=repo_root, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        # Only guards against a hang; six operator builds and the run take ~30 s.
        out, _ = process.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # mpirun and both ranks
        out, _ = process.communicate()
        pytest.fail(f"the smoke run hung:\n{out[-3000:]}")
    assert process.returncode == 0, out[-3000:]
    assert "== Gradient exchange per step, 2 ranks: ratio = variant / d5 ring" in out, out
    for size in ("1 KB", "64 KB", "1 MB"):
        for variant in ("d5 ring", "d5 mpi", "cpp mpi", "cpp topk"):
            assert f"{size:>7} {variant:<9}" in out, (size, variant, out)
    assert "  k=3" in out and "  k=2622" in out  # ceil(0.01 n) of 256 and 262144 floats
    assert "== Summary: ratio to d5 ring" in out
    assert "operator builds or cache lookups:" in out
