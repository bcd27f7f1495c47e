"""Finding and using MPI: the ``mpirun`` next to the running Python (the ``mpich`` wheel
puts it in the virtual environment's ``bin``), and the world communicator when this
process was started by it."""
from __future__ import annotations

import os
import shutil
import sys

from deep500.utils.errors import MissingDependencyError

# Set by MPICH's Hydra, Open MPI, and Slurm respectively.
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def mpirun_executable() -> str:
    """Path of the ``mpirun`` beside ``sys.executable``, else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpirun")
    if found:
        return found
    raise MissingDependencyError("mpich", "mpi", "Launching ranks with mpirun")


def launched_by_mpirun() -> bool:
    return any(variable in os.environ for variable in _RANK_VARIABLES)


def world_communicator():
    """mpi4py's COMM_WORLD when started by mpirun with more than one rank, else None.

    mpi4py is only imported under mpirun, so single-process runs never initialise MPI.
    """
    if not launched_by_mpirun():
        return None
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MissingDependencyError("mpi4py", "mpi", "Running under mpirun") from exc
    return MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() > 1 else None
