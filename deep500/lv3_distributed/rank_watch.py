"""A watcher around each rank that a launcher starts under ``mpirun``, so that a rank
dying without a word (SIGKILL, a segmentation fault, ``os._exit``) is still named.

``mpirun`` starts ``python -I rank_watch.py ENDINGS PROGRAM...`` as each rank; the
watcher starts ``PROGRAM`` as its child (same environment and descriptors, so the MPI
library sees the rank it started), passes SIGINT and SIGTERM on to it, and waits. When
the child ends by a signal or with a status other than 0, it appends one JSON line to
``ENDINGS`` (``{"rank", "pid", "host", "status" or "signal", "time"}``, one
``write(2)`` on an ``O_APPEND`` descriptor) and then ends the same way, so ``mpirun``
sees what it would have seen. The launcher reads the lines when ``mpirun`` has ended
(:func:`read_endings`). A watcher killed by ``mpirun``'s clean-up writes nothing, and
its child dies with it (``PR_SET_PDEATHSIG``, SIGKILL, which also ends a stopped
child): only the ranks that ended of themselves are named.

The watcher imports the standard library only (``-I``: none of the user's path), so
it costs one small interpreter per rank, not a second Deep500.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

# Hydra, Open MPI and PMIx name the rank so (deep500.lv3_distributed.mpi_launch)
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
_FORWARDED = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1


def watched(program: list, endings_path: str) -> list:
    """The interpreter arguments that run ``program`` (a command, its executable
    first) under the watcher, recording abnormal endings in ``endings_path``."""
    return ["-I", os.path.abspath(__file__), endings_path, *program]


def read_endings(endings_path: str) -> list[dict]:
    """The endings the watchers recorded, earliest first; [] when none (a line cut by
    a crash is skipped)."""
    try:
        with open(endings_path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    endings = []
    for line in lines:
        try:
            ending = json.loads(line)
        except ValueError:
            continue
        if isinstance(ending, dict) and isinstance(ending.get("rank"), int):
            endings.append(ending)
    return sorted(endings, key=lambda e: e.get("time", 0))


def describe(ending: dict) -> str:
    """``rank 1 (pid 123 on host) was ended by signal 9 (SIGKILL)`` or ``rank 0 (...)
    exited with status 3``."""
    who = f"rank {ending['rank']} (pid {ending.get('pid')} on {ending.get('host')})"
    if ending.get("signal") is not None:
        number = ending["signal"]
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown signal"
        return f"{who} was ended by signal {number} ({name})"
    return f"{who} exited with status {ending.get('status')}"


def _die_with_watcher() -> None:
    """In the child: SIGKILL when the watcher dies (Linux), so mpirun's clean-up of the
    watcher ends the rank too, even a stopped one."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _record(endings_path: str, ending: dict) -> None:
    data = (json.dumps(ending) + "\n").encode("utf-8")
    fd = os.open(endings_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _end_by(number: int) -> None:
    """End this process by signal ``number`` (as the child ended), without a core
    file of the watcher's own (the child's, if any, is the one that matters)."""
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for forwarded in _FORWARDED:
        signal.signal(forwarded, signal.SIG_DFL)
    try:
        signal.signal(number, signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL and SIGSTOP keep their default anyway
        pass
    os.kill(os.getpid(), number)


def main(arguments: list) -> None:
    endings_path, program = arguments[0], arguments[1:]
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        # Its own process group: a Ctrl-C reaches it once, through the watcher, not
        # also straight from the terminal.
        os.setpgid(0, 0)
        _die_with_watcher()
        if os.getppid() != parent:  # the watcher died before the line above
            os._exit(137)
        try:
            os.execv(program[0], program)
        finally:
            os._exit(127)
    forwarded: dict = {}

    def forward(signum, frame):
        # A Ctrl-C reaches the watcher twice (from the terminal and from mpirun): the
        # rank gets it once.
        if time.monotonic() - forwarded.get(signum, -10.0) > 1.0:
            forwarded[signum] = time.monotonic()
            os.kill(child, signum)

    for number in _FORWARDED:
        signal.signal(number, forward)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    rank = next((os.environ[v] for v in _RANK_VARIABLES if v in os.environ), "0")
    ending = {"rank": int(rank), "pid": child, "host": socket.gethostname(),
              "time": time.time()}
    if os.WIFSIGNALED(status):
        ending["signal"] = os.WTERMSIG(status)
    else:
        ending["status"] = os.WEXITSTATUS(status)
    if ending.get("signal") is not None or ending["status"] != 0:
        try:
            _record(endings_path, ending)
        except OSError as problem:
            sys.stderr.write(f"deep500: {describe(ending)}; could not record it in "
                             f"{endings_path}: {problem}\n")
    if ending.get("signal") is not None:
        _end_by(ending["signal"])
        os._exit(128 + ending["signal"])  # a signal that does not end a process
    os._exit(ending["status"])


if __name__ == "__main__":
    main(sys.argv[1:])
