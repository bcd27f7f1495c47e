"""The emulated-cluster benchmarks run end to end (as root; skipped otherwise):
``lv3_models.py --cluster ... --smoke`` calibrates the link, times every allreduce
algorithm at three sizes in nccl-tests' and OSU's columns and prints the error line
last; ``lv3_cluster_links.py`` measures the three emulations and names the faithful
one. Their targets are not asserted (timings belong to the benchmarks); that the bytes
crossed the links is (the links benchmark's UCX row shows the pitfall)."""
import re
import sys

import pytest

from deep500.lv3_distributed import allreduce_names
from tests.lv3_distributed.mpi_helpers import run_program
from tests.lv3_distributed.test_cluster_emulation import (  # noqa: F401 (the skip)
    no_leftovers, pytestmark)
from tests.benchmarks.run_time_line import says_expected_run_time_first

LAST = re.compile(r"allreduce model error on the emulated cluster: median (\d+\.\d)%, "
                  r"p90 (\d+\.\d)%$")


@pytest.mark.mpi
@pytest.mark.slow
def test_the_models_benchmark_on_a_cluster_prints_every_algorithm_and_the_error(
        repo_root, no_leftovers):
    status, out, _ = run_program([sys.executable, str(repo_root / "benchmarks" /
                                                      "lv3_models.py"),
                                  "--cluster", "nodes=2,rate=1gbit", "--smoke"], timeout=300)
    assert status == 0, out[-3000:]
    assert "algbw GB/s busbw GB/s  predicted  ratio" in out, out
    for size in (1024, 16384, 262144):
        for name in allreduce_names():
            assert re.search(rf"^\s+{size}\s+{size // 4}\s+{name}\s", out, re.M), (size, name)
    assert LAST.search(out.strip().splitlines()[-1]), out[-2000:]


@pytest.mark.mpi
@pytest.mark.slow
def test_the_links_benchmark_names_the_faithful_emulation(repo_root, no_leftovers):
    status, out, _ = run_program([sys.executable, str(repo_root / "benchmarks" /
                                                      "lv3_cluster_links.py"),
                                  "--bytes", "1048576", "--repeats", "3"], timeout=300)
    assert status == 0, out[-3000:]
    assert says_expected_run_time_first(out), out[:1000]
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines()
            if line.startswith(("shared memory", "nodes", "loopback"))}
    assert set(rows) >= {"shared memory", "nodes", "loopback", "nodes, UCX"}, out
    sent = re.search(r"node0 sent ([0-9.]+) MB", rows["nodes"])
    assert sent and float(sent.group(1)) >= 2.0, rows["nodes"]  # >= 2 x 1 MB crossed
    assert re.search(r"^faithful emulation: (nodes|loopback) \(bibw/bw", out.strip()
                     .splitlines()[-1]), out[-1000:]
