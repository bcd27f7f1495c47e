"""Finding the ``mpirun`` that launches ranks, and saying what is missing when there is
none.

Looked for in order: beside the running Python (the ``mpich`` wheel puts it in the
virtual environment's ``bin``), on ``PATH``, then among the files the ``mpich`` wheel
installed (found through its package metadata, wherever its scripts went: a Python
started by another path than the environment's ``bin``). The error names each place
and whether the ``mpich`` package is installed (issue 31, item 7: it used to say that
mpich was not installed when it was).
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys

from deep500.utils.errors import Deep500Error, MissingDependencyError


class MpirunNotFoundError(MissingDependencyError):
    """No ``mpirun`` where Deep500 looks; the message says where it looked and what to
    install or fix."""

    def __init__(self, message: str, distribution: str):
        Deep500Error.__init__(self, message)
        self.module = distribution
        self.extra = "mpi"


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def wheel_mpirun(distribution: str = "mpich") -> tuple[str | None, str | None]:
    """``(version, mpirun path)`` of the installed ``distribution`` (None, None when it is
    not installed; a version and None when it installed no executable ``mpirun``)."""
    try:
        version = importlib.metadata.version(distribution)
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return None, None
    for file in files:
        if file.name == "mpirun":
            located = os.path.normpath(str(file.locate()))
            if _executable(located):
                return version, located
    return version, None


def find_mpirun(python: str | None = None, search_path: str | None = None,
                distribution: str = "mpich") -> str:
    """The ``mpirun`` beside ``python`` (default ``sys.executable``), else on
    ``search_path`` (default ``$PATH``), else the one ``distribution`` installed;
    MpirunNotFoundError naming each place otherwise."""
    python = python or sys.executable
    beside = os.path.join(os.path.dirname(python), "mpirun")
    if _executable(beside):
        return beside
    on_path = shutil.which("mpirun", path=search_path)
    if on_path:
        return on_path
    version, installed = wheel_mpirun(distribution)
    if installed:
        return installed
    looked = (f"Launching ranks needs an mpirun executable, and none was found: not "
              f"beside this Python ({beside}), not on PATH")
    if version is None:
        raise MpirunNotFoundError(
            f"{looked}, and the Python package '{distribution}' that provides one is not "
            f"installed. Install it with: pip install 'deep500[mpi]' (or put an MPI's "
            f"mpirun on PATH)", distribution)
    raise MpirunNotFoundError(
        f"{looked}; the Python package '{distribution}' {version} is installed but its "
        f"files hold no executable mpirun (was it removed?). Reinstall it with: pip "
        f"install --force-reinstall '{distribution}=={version}' (or put an MPI's mpirun "
        f"on PATH)", distribution)
