"""A recipe's per-configuration ``timeout``: a daemon thread on every rank that ends the
whole job when one configuration runs longer than the recipe allows.

The thread cannot stop a hung main thread, so it records what it knows (the error record
of the hung configuration and the manifest's status, see
:func:`deep500.results.files.record_failure`) and then ends every rank:
``MPI_Abort`` under ``mpirun`` (MPI-4.0, section 9.5: "make a best attempt to abort all
tasks in the group of comm"), ``os._exit`` in a single process. A hang that holds
Python's GIL (a C extension looping without releasing it) keeps the thread from
running; under MPI rank 0 then still notices that the rank's results do not arrive
(:func:`deep500.lv3_distributed.mpi_launch.gather_to_root`).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable

# The exit status of a job ended by a timeout, as GNU coreutils' timeout(1) uses.
TIMEOUT_EXIT_STATUS = 124


class Watchdog:
    """Calls ``on_expiry(what, seconds)`` from its own thread when a block entered with
    :meth:`watch` has run ``timeout`` seconds. ``on_expiry`` is expected to end the
    process; if it returns, the block is no longer watched."""

    def __init__(self, timeout: float, on_expiry: Callable[[object, float], None]):
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.timeout = float(timeout)
        self._on_expiry = on_expiry
        self._condition = threading.Condition()
        self._watched = None     # (what, start, token) while a block runs
        self._token = 0
        self._thread = None
        self._closed = False

    @contextlib.contextmanager
    def watch(self, what):
        with self._condition:
            self._token += 1
            self._watched = (what, time.monotonic(), self._token)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="deep500-watchdog",
                                                daemon=True)
                self._thread.start()
            self._condition.notify()
        try:
            yield
        finally:
            with self._condition:
                self._watched = None
                self._condition.notify()

    def close(self) -> None:
        """Stop the thread (at the end of a run)."""
        with self._condition:
            self._closed = True
            self._watched = None
            self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                while self._watched is None and not self._closed:
                    self._condition.wait()
                if self._closed:
                    return
                what, start, token = self._watched
                remaining = start + self.timeout - time.monotonic()
                if remaining > 0:
                    self._condition.wait(remaining)
                    continue
                expired = self._watched is not None and self._watched[2] == token
            if expired:
                self._on_expiry(what, time.monotonic() - start)
                with self._condition:
                    if self._watched is not None and self._watched[2] == token:
                        self._watched = None
