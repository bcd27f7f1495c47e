"""A read-only file descriptor that a dataset opens on its first read and shares among
its threads, and that is never pickled: a worker process (a DataLoader's, a sampler's
pool) opens its own, since a descriptor number means nothing in another process."""
from __future__ import annotations

import os
import threading


class SharedReadDescriptor:
    """Mixin: ``_descriptor()`` opens ``_descriptor_path()`` once (thread-safe, double
    checked), ``close()`` closes it; call ``_init_descriptor()`` in ``__init__``.
    ``_lock`` also serialises seek-and-read where ``os.pread`` is missing."""

    def _init_descriptor(self) -> None:
        self._fd: int | None = None
        self._lock = threading.Lock()

    def _descriptor_path(self) -> str:
        raise NotImplementedError

    def _descriptor(self) -> int:
        if self._fd is None:
            with self._lock:
                if self._fd is None:
                    self._fd = os.open(self._descriptor_path(),
                                       os.O_RDONLY | getattr(os, "O_BINARY", 0))
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        try:
            self.close()
        except (OSError, AttributeError):
            pass

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fd"], state["_lock"] = None, None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
