"""Finding and using MPI: the ``mpirun`` next to the running Python (the ``mpich`` wheel
puts it in the virtual environment's ``bin``), the world communicator when this
process was started by it, re-running a program under it (``mpi_fork``), and stopping
every rank when one fails (``guarded_main``)."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import traceback
from typing import Sequence

from deep500.utils.errors import Deep500Error, MissingDependencyError

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


# Set in the ranks that mpi_fork starts, so that a launcher which sets none of the
# variables above still cannot make them fork again.
_FORKED_VARIABLE = "DEEP500_MPI_FORKED"


def in_mpi_world() -> bool:
    """Whether this process is a rank: started by ``mpirun`` directly, or through
    :func:`mpi_fork` (``deep500 run --np N`` included)."""
    return launched_by_mpirun() or bool(os.environ.get(_FORKED_VARIABLE))


def mpi_fork(n: int, mpirun_args: Sequence[str] = (),
             program: Sequence[str] | None = None) -> None:
    """Re-run this Python program under ``mpirun -np n`` and exit with its status.

    The program is re-run as it was started (``sys.orig_argv``: the same script or
    ``-m`` module, interpreter options and arguments), or as ``program`` says (the
    interpreter's arguments, e.g. ``["-m", "deep500", "run", "recipe.yaml"]``), by the
    interpreter ``sys.executable`` under ``mpirun_executable()``, with ``mpirun_args``
    (e.g. ``["-bind-to", "none"]``) before the program. In the ranks, which MPI started,
    ``mpi_fork`` returns at once and the program continues; the parent waits for
    ``mpirun`` and exits with its exit status. Nothing happens for ``n <= 1`` or when
    already under ``mpirun``. Call it first, before anything initialises MPI.
    """
    if n <= 1 or in_mpi_world():
        return
    if program is None:
        program = list(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))[1:]
        if not sys.argv or sys.argv[0] == "":
            program = []
    program = list(program)
    if not program:
        raise Deep500Error(
            "mpi_fork re-runs the current program under mpirun, but this is an "
            "interactive session with no program to re-run. Put the code in a script "
            f"and run it, or start it yourself: {mpirun_executable()} -np {n} "
            f"{sys.executable} script.py")
    command = [mpirun_executable(), "-np", str(int(n)), *mpirun_args, sys.executable,
               *program]
    sys.stdout.flush()
    sys.stderr.flush()
    status = subprocess.call(command, env={**os.environ, _FORKED_VARIABLE: "1"})
    sys.exit(status if status >= 0 else 128 - status)


class guarded_main(contextlib.ContextDecorator):
    """Stop every rank when one fails, instead of leaving the others waiting forever.

    Use as ``with guarded_main(): ...`` around a rank's work, or as a decorator
    ``@guarded_main()`` of its main function. On an exception (or a ``SystemExit`` with
    a non-zero status) the rank prints ``rank R failed: <traceback>`` to stderr,
    flushes stdout and stderr (results already written stay written) and calls
    ``Abort`` on ``comm`` (a communicator, a ``CommunicationNetwork``, or ``None`` for
    ``COMM_WORLD``): ``mpirun`` then ends every rank and exits with a non-zero status.
    ``on_failure(rank, message)``, if given, runs just before ``Abort`` (e.g. to record
    the failure in a file the other ranks can no longer finish); its own errors are
    printed and ignored. Outside ``mpirun`` (one process, MPI not running) exceptions
    pass through unchanged.
    """

    def __init__(self, comm=None, exit_code: int = 1, on_failure=None):
        self.comm = comm
        self.exit_code = exit_code
        self.on_failure = on_failure

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            return False
        code = self.exit_code
        if issubclass(exc_type, SystemExit):
            if exc.code in (None, 0):
                return False
            code = exc.code if isinstance(exc.code, int) else self.exit_code
        comm = getattr(self.comm, "comm", self.comm)
        if comm is None:
            if not launched_by_mpirun():
                return False
            try:
                from mpi4py import MPI
            except ImportError:
                return False
            comm = MPI.COMM_WORLD
        rank = comm.Get_rank()
        if issubclass(exc_type, SystemExit):
            message = f"rank {rank} failed: exited with status {exc.code}\n"
        else:
            message = f"rank {rank} failed: " + "".join(
                traceback.format_exception(exc_type, exc, tb))
        try:
            sys.stdout.flush()
        finally:
            sys.stderr.write(message)
            if self.on_failure is not None:
                try:
                    self.on_failure(rank, message)
                except Exception as problem:  # the failure itself matters more
                    sys.stderr.write(f"rank {rank}: on_failure raised {problem!r}\n")
            sys.stderr.flush()
            comm.Abort(code)
            # MPICH's MPI_Abort can return before mpirun's kill arrives; go no further.
            os._exit(code)
