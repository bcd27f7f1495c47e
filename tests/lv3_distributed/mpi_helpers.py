"""Running programs under real ``mpirun`` from tests: each in its own process group,
killed as a whole on timeout so that no rank outlives its test."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deep500.lv3_distributed import mpirun_executable

SCRIPTS = Path(__file__).parent / "scripts"
REPO = Path(__file__).resolve().parents[2]
_LAUNCH_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "OMPI_COMM_WORLD_RANK",
                     "PMIX_RANK", "DEEP500_MPI_FORKED")


def _environment():
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_program(command, timeout):
    """Run ``command`` in its own process group; on timeout kill that group (mpirun and
    every rank it started), so no rank outlives the test. Returns (status, output,
    seconds)."""
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, env=_environment(), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{' '.join(map(str, command))} ran over {timeout} s:\n{output[-3000:]}")
    return process.returncode, output, time.monotonic() - start


def mpirun(n, script, *args, timeout=120):
    return run_program([mpirun_executable(), "-np", str(n), sys.executable,
                        str(SCRIPTS / script), *map(str, args)], timeout)
