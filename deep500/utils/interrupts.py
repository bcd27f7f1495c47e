"""SIGTERM and SIGINT as exceptions, so that ``finally`` blocks run when a run or a
build is stopped: a run folder's manifest is finished as ``interrupted``, a compiler's
process group is killed and its temporary folder removed.

Python turns SIGINT into ``KeyboardInterrupt`` but lets SIGTERM (what ``kill``, job
schedulers and container runtimes send) end the process at once, without unwinding.
Inside :func:`signals_raise` both raise :class:`Interrupted` in the main thread; its
``exit_status`` follows the shell's convention for a process ended by a signal, 128 +
the signal number (130 for SIGINT, 143 for SIGTERM; POSIX Shell Command Language,
2.8.2 "Exit Status for Commands").
"""
from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The process received ``signum``; ``exit_status`` is 128 + ``signum``."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        self.exit_status = 128 + self.signum
        super().__init__(f"interrupted by {signal.Signals(self.signum).name}")


_deferring = 0       # depth of deferred() blocks in the main thread
_pending: list = []  # signals that arrived inside them


def _handler(signum, frame):
    if _deferring:
        _pending.append(signum)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_raise(signals=SIGNALS):
    """Within the block, ``signals`` raise :class:`Interrupted` in the main thread.
    Outside the main thread (where Python cannot install handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in signals}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextlib.contextmanager
def deferred():
    """A signal arriving inside the block is raised when the block ends, so that what
    the block writes (one line of results, a manifest) is written whole. It is dropped
    when the block ends by an exception, which is already unwinding the program."""
    global _deferring
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        _deferring -= 1
        if not _deferring and _pending:
            signum = _pending[0]
            _pending.clear()
            if not failed:
                raise Interrupted(signum)
