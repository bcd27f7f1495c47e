"""Running a launcher's child (``mpirun``, or a program in an emulated cluster) and
stopping it when the launcher is interrupted: the signal is passed on, so the child
ends its ranks and they finish what they write; a child that does not end within the
grace period, or a second signal, is killed."""
from __future__ import annotations

import ctypes
import signal
import subprocess
import sys


def die_with_parent() -> None:
    """In the child (``preexec_fn``): SIGTERM when the launcher dies (prctl
    PR_SET_PDEATHSIG, Linux), so a SIGKILLed launcher does not leave it running."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_child(process: subprocess.Popen, signum: int, grace_seconds: float = 30.0) -> None:
    try:
        process.send_signal(signum)
        process.wait(timeout=grace_seconds)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        process.kill()
        process.wait()


def run_child(command: list, environment: dict, tied: bool = False) -> int:
    """Run ``command``, wait and return its exit status (128 + signal when a signal
    ended it). A SIGINT or SIGTERM raised here (``KeyboardInterrupt``; SIGTERM under
    ``deep500.utils.interrupts``) is passed on to it and raised again once it ended.
    ``tied``: the child gets SIGTERM when this process dies (die_with_parent)."""
    sys.stdout.flush()
    sys.stderr.flush()
    process = subprocess.Popen(command, env=environment,
                               preexec_fn=die_with_parent if tied else None)
    try:
        status = process.wait()
    except KeyboardInterrupt as stop:
        stop_child(process, getattr(stop, "signum", signal.SIGINT))
        raise
    return status if status >= 0 else 128 - status
