"""Where ``mpirun`` is looked for, and an error that names what is missing (issue 31,
item 7: without mpirun the message said mpich was not installed even when it was)."""
import os
import stat

import pytest

from deep500.lv3_distributed.mpirun_search import (MpirunNotFoundError, find_mpirun,
                                                   wheel_mpirun)
from deep500.utils.errors import MissingDependencyError


def fake_mpirun(folder):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mpirun"
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_one_beside_python_comes_first_then_path(tmp_path):
    beside = fake_mpirun(tmp_path / "venv" / "bin")
    on_path = fake_mpirun(tmp_path / "elsewhere")
    python = str(tmp_path / "venv" / "bin" / "python")
    assert find_mpirun(python, str(tmp_path / "elsewhere")) == beside
    assert find_mpirun(str(tmp_path / "python"), str(tmp_path / "elsewhere")) == on_path


def test_the_mpich_wheel_is_found_from_its_metadata(tmp_path):
    version, _ = wheel_mpirun("mpich")
    if version is None:
        pytest.skip("the mpich wheel is not installed")
    found = find_mpirun(str(tmp_path / "python"), str(tmp_path))
    assert os.path.basename(found) == "mpirun" and os.access(found, os.X_OK)


def test_a_missing_package_is_named_as_missing(tmp_path):
    with pytest.raises(MpirunNotFoundError) as error:
        find_mpirun(str(tmp_path / "python"), str(tmp_path), "no-such-mpi-wheel")
    message = str(error.value)
    assert f"not beside this Python ({tmp_path / 'mpirun'}), not on PATH" in message
    assert "'no-such-mpi-wheel' that provides one is not installed" in message
    assert "pip install 'deep500[mpi]'" in message
    assert isinstance(error.value, MissingDependencyError)


def test_an_installed_package_without_mpirun_is_not_called_missing(tmp_path):
    import numpy
    with pytest.raises(MpirunNotFoundError) as error:
        find_mpirun(str(tmp_path / "python"), str(tmp_path), "numpy")
    message = str(error.value)
    assert f"'numpy' {numpy.__version__} is installed but its files hold no " \
           f"executable mpirun" in message
    assert "not installed" not in message
