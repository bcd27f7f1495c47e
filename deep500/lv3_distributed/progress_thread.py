"""A background thread that drives MPI's progress while non-blocking collectives are in
flight, so that they advance between the calls of the thread that computes.

Why: MPICH (without its own asynchronous progress thread) advances a non-blocking
collective only inside MPI calls, and Deep500's non-blocking ring posts its next step
only inside ``test()``. During a long backward node (a convolution of tens of
milliseconds) no such call happens; on a network that moves bytes by itself (TCP in the
kernel, an RDMA NIC) the link then idles once the posted step is done. Horovod's
background thread and PyTorch DDP's communication thread exist for this reason
(Sergeev & Del Balso 2018; Li et al., VLDB 2020); MPICH's ``MPIR_CVAR_ASYNC_PROGRESS``
is the same idea inside MPI, but it polls without pause and takes a core from compute.

This thread sleeps ``interval`` seconds between calls of ``progress`` and waits on an
event (no polling) while nothing is in flight. NumPy's kernels and sleeping release
Python's GIL, so the calls slip in while backprop runs; each costs a few microseconds
(one ``MPI_Test``). The caller serialises ``progress`` against its own MPI calls with
:attr:`ProgressThread.lock` (mpi4py initialises MPI with ``MPI_THREAD_MULTIPLE``, and the
non-blocking ring's state is not thread-safe).
"""
from __future__ import annotations

import threading
import time

from deep500.utils.errors import Deep500Error

#: Seconds between two progress calls while collectives are in flight: at 1 Gbit/s a
#: link moves 62 KB in 0.5 ms, far less than a socket buffer holds, so the link does
#: not run dry between calls.
DEFAULT_PROGRESS_INTERVAL = 0.0005
PROGRESS_MODES = ("calls", "thread")


def check_progress(value, where: str = "progress") -> str:
    """``value`` if it names a progress mode, else ``Deep500Error``."""
    if value not in PROGRESS_MODES:
        raise Deep500Error(f"{where}={value!r}: give 'calls' (MPI progresses inside the "
                           f"hooks' MPI_Test calls after each backward node) or 'thread' "
                           f"(a background thread also tests every "
                           f"{DEFAULT_PROGRESS_INTERVAL * 1e3:g} ms)")
    return value


class ProgressThread:
    """Calls ``progress()`` every ``interval`` seconds between :meth:`resume` and
    :meth:`pause`, holding :attr:`lock`; :meth:`close` ends the thread.

    ``progress`` returns True while there is still something to progress; when it
    returns False the thread pauses itself until the next :meth:`resume`.
    Attribute ``calls``: how many times ``progress`` ran (a count, for tests and the
    cost estimate).
    """

    def __init__(self, progress, interval: float = DEFAULT_PROGRESS_INTERVAL):
        if not interval > 0:
            raise Deep500Error(f"ProgressThread: interval={interval!r}: give seconds > 0")
        self._progress, self._interval = progress, float(interval)
        self.lock = threading.Lock()
        self.calls = 0
        self._wanted = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="deep500-mpi-progress",
                                        daemon=True)
        self._thread.start()

    def resume(self) -> None:
        self._wanted.set()

    def pause(self) -> None:
        self._wanted.clear()

    def close(self) -> None:
        self._closed = True
        self._wanted.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._closed:
                return
            time.sleep(self._interval)   # without the GIL: backprop runs meanwhile
            with self.lock:
                if self._closed:
                    return
                if not self._wanted.is_set():
                    continue
                self.calls += 1
                if not self._progress():
                    self._wanted.clear()
