"""Finding and using MPI: the ``mpirun`` next to the running Python (the ``mpich`` wheel
puts it in the virtual environment's ``bin``), the world communicator when this
process was started by it, re-running a program under it (``mpi_fork``, with a
checked hostfile: ``read_hostfile``; ``run_under_mpirun`` returns the status instead
of exiting, for a launcher of several jobs such as the rank grid of a recipe), this rank's index on its node (``local_rank``,
for mapping ranks to GPUs), and stopping every rank when one fails
(``guarded_main``)."""
from __future__ import annotations

import contextlib
import os
import re
import sys
import time
import traceback
from typing import Sequence

from deep500.lv3_distributed.child_process import run_child
from deep500.lv3_distributed.mpirun_search import find_mpirun
from deep500.utils.errors import Deep500Error, MissingDependencyError

# Set by MPICH's Hydra, Open MPI, and Slurm respectively.
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def mpirun_executable() -> str:
    """Path of the ``mpirun`` beside ``sys.executable``, else the one on PATH, else the
    ``mpich`` wheel's; an error saying where it looked otherwise
    (:func:`deep500.lv3_distributed.mpirun_search.find_mpirun`)."""
    return find_mpirun()


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


# This rank's index among the ranks of its node, as Open MPI, MPICH's Hydra and Slurm's
# srun set it (in this order of preference).
LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


def local_rank(comm=None, environ=None) -> int:
    """This rank's index among the ranks on the same node (0 .. ranks on the node - 1):
    what a GPU node maps to a device (``f"gpu:{local_rank() % gpus_per_node}"``).

    Read from the launcher's environment (``environ``, default ``os.environ``): Open
    MPI's ``OMPI_COMM_WORLD_LOCAL_RANK``, MPICH Hydra's ``MPI_LOCALRANKID``, Slurm's
    ``SLURM_LOCALID``, the first one set. Without any, it is this rank's rank in
    ``comm`` (an mpi4py communicator; default the world under ``mpirun``) split by
    ``MPI_COMM_TYPE_SHARED`` (MPI-3.0 section 6.4.2: the ranks that share memory,
    i.e. a node), which is collective over ``comm``; 0 outside MPI. A value that is
    not a non-negative integer raises ``Deep500Error`` naming the variable.
    """
    environ = os.environ if environ is None else environ
    for name in LOCAL_RANK_VARIABLES:
        value = environ.get(name)
        if value is not None and value.strip() != "":
            if not value.strip().isdecimal():
                raise Deep500Error(f"{name}={value!r} is not a local rank (a "
                                   f"non-negative integer); unset it or fix the "
                                   f"launcher's environment")
            return int(value)
    if comm is None:
        comm = world_communicator()
        if comm is None:
            return 0
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank()
    finally:
        node.Free()


# One host per line of an MPICH (Hydra) hostfile: a name or address, optionally
# ":n" processes; "#" starts a comment.
_HOSTFILE_LINE = re.compile(r"^([A-Za-z0-9_.\-]+)(?::([0-9]+))?$")
# The most processes one hostfile line may ask for: Hydra reads the count into a C int,
# and 2147483648 sent MPICH's mpirun spinning.
MAX_HOST_PROCESSES = 65536


def read_hostfile(path) -> list[tuple[str, int]]:
    """The hosts of an MPICH hostfile (``mpirun -f FILE``) as ``[(host, processes)]``.

    Format (MPICH's Hydra process manager): one host per line, ``host`` or
    ``host:n`` (1 <= n <= ``MAX_HOST_PROCESSES`` processes on it, default 1); ``#``
    starts a comment; blank lines
    are skipped. Hydra fills the hosts in order and wraps around when ``-np`` exceeds
    their sum. A file that cannot be read, holds no host, or has a line of another
    form (e.g. Open MPI's ``host slots=4``) raises ``Deep500Error`` naming the line
    and what to write instead.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise Deep500Error(f"hostfile {path}: cannot read it ({exc}); give a text file "
                           f"with one host per line, 'host' or 'host:n'") from None
    hosts = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        match = _HOSTFILE_LINE.match(text)
        count = match.group(2) if match is not None else None
        if count is not None and (len(count) > 9 or int(count) > MAX_HOST_PROCESSES):
            shown = count if len(count) <= 12 else count[:12] + "..."
            raise Deep500Error(f"hostfile {path}, line {number}: host {match.group(1)!r} "
                               f"asks for {shown} processes; at most "
                               f"{MAX_HOST_PROCESSES} are allowed (write the host's real "
                               f"number of cores, e.g. '{match.group(1)}:64')")
        if match is None or (match.group(2) is not None and int(match.group(2)) < 1):
            slots = re.match(r"^(\S+)\s+(?:slots|max_slots|max-slots)\s*=\s*([0-9]+)",
                             text)
            hint = (f"; for MPICH write '{slots.group(1)}:{slots.group(2)}' (Open MPI's "
                    f"'slots=' is not MPICH's format)" if slots else "")
            raise Deep500Error(f"hostfile {path}, line {number}: {text!r} is not 'host' "
                               f"or 'host:n' (a host name or address, optionally ':' and "
                               f"a number of processes >= 1){hint}")
        hosts.append((match.group(1), int(match.group(2) or 1)))
    if not hosts:
        raise Deep500Error(f"hostfile {path} names no host; write one per line, 'host' "
                           f"or 'host:n' (e.g. 'node01:4')")
    return hosts


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
    sys.exit(run_under_mpirun(n, program, mpirun_args))


def mpirun_command(n: int, program: Sequence[str],
                   mpirun_args: Sequence[str] = ()) -> list[str]:
    """``mpirun -np n [mpirun_args] <python> <program>``, as :func:`run_under_mpirun`
    runs it (``mpirun_executable()`` and ``sys.executable``)."""
    return [mpirun_executable(), "-np", str(int(n)), *mpirun_args, sys.executable,
            *program]


def run_under_mpirun(n: int, program: Sequence[str], mpirun_args: Sequence[str] = (),
                     environment: dict | None = None) -> int:
    """Run ``python <program>`` on ``n`` ranks (``n >= 1``; one rank is ``mpirun -np
    1``) under the ``mpirun`` beside the interpreter, wait for it and return its exit
    status (``128 + signal`` when a signal ended it). The ranks see
    ``environment`` added to this process's and are marked as forked
    (:func:`in_mpi_world`), so they do not launch again. Inside an emulated cluster's
    block (``deep500.lv3_distributed.cluster.emulated_cluster``) mpirun runs in the
    cluster, its ranks on the cluster's nodes. A SIGINT or SIGTERM
    (``KeyboardInterrupt``) while waiting is passed on to ``mpirun``, which passes it to
    the ranks, and raised again once ``mpirun`` has ended (after a 30 s grace period it
    is killed)."""
    command = mpirun_command(n, program, mpirun_args)
    environment = {**os.environ, **(environment or {}), _FORKED_VARIABLE: "1"}
    from deep500.lv3_distributed.cluster.session import active_cluster
    cluster = active_cluster()
    if cluster is not None:  # inside ``emulated_cluster``: mpirun starts in the cluster
        if any(argument in ("-f", "-hostfile", "-hosts") for argument in mpirun_args):
            raise Deep500Error("an emulated cluster places the ranks on its own nodes; "
                               "give --cluster or a hostfile, not both")
        command, environment = cluster.command(command), cluster.environment(environment)
    # mpirun passes a SIGINT or SIGTERM on to the ranks, which finish what they write;
    # killing mpirun instead would leave them running.
    return run_child(command, environment, tied=cluster is not None)


_FORWARD_SECONDS = 0.2  # see guarded_main.__exit__


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
    printed and ignored. Exceptions of the types in ``agreed`` pass through: every rank
    raises them alike, after agreeing (e.g. a run folder that rank 0 found taken), so
    none is left waiting. Outside ``mpirun`` (one process, MPI not running) exceptions
    pass through unchanged.
    """

    def __init__(self, comm=None, exit_code: int = 1, on_failure=None, agreed=()):
        self.comm = comm
        self.exit_code = exit_code
        self.on_failure = on_failure
        self.agreed = tuple(agreed)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None or (self.agreed and issubclass(exc_type, self.agreed)):
            return False
        code = self.exit_code
        if issubclass(exc_type, SystemExit):
            if exc.code in (None, 0):
                return False
            code = exc.code if isinstance(exc.code, int) else self.exit_code
        elif isinstance(getattr(exc, "exit_status", None), int):
            code = exc.exit_status  # deep500.utils.interrupts.Interrupted: 128 + signal
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
        elif issubclass(exc_type, KeyboardInterrupt):  # a signal, not a bug: no traceback
            message = f"rank {rank} stopped: {exc or exc_type.__name__}\n"
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
            # The message sits in the launcher's pipe; MPI_Abort can end the launcher's
            # proxy before it forwards it (seen under load: an empty job output). A
            # moment on a path that ends the job anyway lets the message through.
            time.sleep(_FORWARD_SECONDS)
            comm.Abort(code)
            # MPICH's MPI_Abort can return before mpirun's kill arrives; go no further.
            os._exit(code)


def abort_job(comm, code: int) -> None:
    """End this process and, under ``mpirun`` (``comm`` not None), every rank of the
    job, with exit status ``code``; callable from any thread. Flushes stdout and stderr
    first, so what was printed is kept."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not stop the abort
            pass
    comm = getattr(comm, "comm", comm)
    if comm is not None:
        comm.Abort(code)
    # MPICH's MPI_Abort can return before mpirun's kill arrives; go no further.
    os._exit(code)


class LateRanks(Exception):
    """:func:`gather_to_root` on rank 0 passed its deadline; ``received`` holds what
    arrived (None for ``missing`` ranks)."""

    def __init__(self, missing: list[int], received: list):
        self.missing = missing
        self.received = received
        super().__init__(f"rank(s) {missing} sent nothing before the deadline")


_GATHER_TAG = 17017


def gather_to_root(comm, value, deadline: float | None = None,
                   poll_seconds: float = 0.001):
    """Every rank's ``value`` on rank 0 (a list in rank order; None on the other ranks),
    as ``comm.gather(value, root=0)``. With a ``deadline`` (``time.monotonic()``
    seconds), rank 0 receives by polling (``MPI_Iprobe`` every ``poll_seconds``) and
    raises :class:`LateRanks` naming the ranks whose value had not arrived by then,
    rather than waiting forever for a rank that hangs. Give ``comm`` a communicator of
    its own (``Dup``), so that no other receive matches these messages."""
    if deadline is None:
        return comm.gather(value, root=0)
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank != 0:
        comm.send(value, dest=0, tag=_GATHER_TAG)
        return None
    received = [value] + [None] * (size - 1)
    missing = list(range(1, size))
    while missing:
        for source in list(missing):
            if comm.iprobe(source=source, tag=_GATHER_TAG):
                received[source] = comm.recv(source=source, tag=_GATHER_TAG)
                missing.remove(source)
        if missing:
            if time.monotonic() > deadline:
                raise LateRanks(missing, received)
            time.sleep(poll_seconds)
    return received
