import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# OpenMP threads (PyTorch's libgomp) that wait for work sleep instead of spinning: on two
# cores shared by MPI ranks and other CI jobs a spinning waiter holds a core its partner
# needs (a digits MLP step: 35 ms wall, 2 ms with PASSIVE; docs/measurement.md). Set at
# import, before any test imports torch; the processes the tests start inherit it. No
# test asserts a time, so nothing it checks depends on the wait policy.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture
def repo_root() -> pathlib.Path:
    return REPO_ROOT


@pytest.fixture(autouse=True, scope="session")
def _quiet_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(autouse=True, scope="session")
def _private_results_database(tmp_path_factory):
    """Runs made by the tests are stored in a session database, not results/deep500.db
    of the directory pytest runs in (subprocesses inherit the variable)."""
    previous = os.environ.get("DEEP500_DB")
    os.environ["DEEP500_DB"] = str(tmp_path_factory.mktemp("deep500_db") / "deep500.db")
    yield
    if previous is None:
        os.environ.pop("DEEP500_DB", None)
    else:
        os.environ["DEEP500_DB"] = previous


@pytest.fixture(autouse=True, scope="session")
def _private_build_cache(tmp_path_factory):
    """C++ operators built by the tests go to a session folder, not ~/.cache/deep500."""
    previous = os.environ.get("DEEP500_CACHE")
    os.environ["DEEP500_CACHE"] = str(tmp_path_factory.mktemp("deep500_cache"))
    yield
    if previous is None:
        os.environ.pop("DEEP500_CACHE", None)
    else:
        os.environ["DEEP500_CACHE"] = previous


@pytest.fixture(autouse=True, scope="session")
def _compiled_modules_kept():
    """Where the environment forbids writing bytecode (PYTHONDONTWRITEBYTECODE, as this
    project's containers set it), every Python process a test starts (each ``deep500``
    command, each MPI rank) would compile Deep500's modules from source again: importing
    the recipe runner, the reference framework, lv3_distributed and the report took 1.14
    CPU-s a process, 0.65 from compiled modules. The processes the tests start may write
    them (``__pycache__``, ignored by git). Not PYTHONPYCACHEPREFIX: under a prefix,
    Python ignores the installed packages' own compiled modules, and the first process to
    import TensorFlow compiled it again (30 CPU-s instead of 8)."""
    previous = os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    yield
    if previous is not None:
        os.environ["PYTHONDONTWRITEBYTECODE"] = previous


@pytest.fixture(scope="session")
def quick_machine(tmp_path_factory):
    """One ``deep500 calibrate --np 2 --quick --quiet`` run of the session (it takes a
    quarter of a minute on 2 cores): the finished process (its exit status and output)
    and the machine file it wrote. Read by the calibration test and handed as
    ``--machine`` to the benchmarks that would otherwise calibrate the same way."""
    out = tmp_path_factory.mktemp("quick_machine") / "machine.yaml"
    completed = subprocess.run([sys.executable, "-m", "deep500", "calibrate", "--np", "2",
                                "--out", str(out), "--quick", "--quiet"],
                               capture_output=True, text=True, timeout=300)
    return completed, out
