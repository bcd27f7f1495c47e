"""MPI from the first day: a recipe under the mpirun next to sys.executable, 2 ranks."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from deep500.lv3_distributed import mpirun_executable

RECIPE = textwrap.dedent("""
    name: mpi-tiny
    fixed: {dtype: float64, seed: 1}
    mutable:
      framework: [reference, pytorch]
      operator:
        - {op: Gemm, inputs: [[16, 8], [8, 4]]}
        - {op: Relu, shape: [3, 7]}
    metrics:
      WallclockTime: {reruns: 6, warmup: 1}
      MaxError: {}
    acceptance: ["MaxError.relative <= 1e-12"]
""")


def test_mpirun_is_found_beside_python():
    path = mpirun_executable()
    assert os.path.dirname(path) == os.path.dirname(sys.executable)


@pytest.mark.mpi
def test_recipe_under_mpirun_gathers_every_rank(tmp_path):
    recipe = tmp_path / "mpi.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "run"
    completed = subprocess.run(
        [mpirun_executable(), "-np", "2", sys.executable, "-m", "deep500", "run", str(recipe),
         "--out", str(out), "--quiet"], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 8
    assert sorted(r["rank"] for r in records) == [0] * 4 + [1] * 4
    assert all(r["size"] == 2 and r["passed"] for r in records)
    # Unset thread counts are shared fairly between ranks on the cores they may use.
    from deep500.utils.threads import usable_cpu_count
    expected_threads = max(1, usable_cpu_count() // 2)
    assert all(r["configuration"]["threads"] == expected_threads for r in records)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mpi_ranks"] == 2 and manifest["status"] == "complete"
    assert "| Rank |" in (out / "report.md").read_text()
