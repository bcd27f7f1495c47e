"""A write that fails because the file system cannot take it, said as such.

A run writes its records, manifest, training logs and report into a folder the user
chose; when that folder's file system fills up, is read-only, or refuses a file that
large, the run cannot go on. :func:`storage_error` turns such an ``OSError``
(``ENOSPC``, ``EDQUOT``, ``EROFS``, ``EFBIG``) into a :class:`StorageError`, a
``Deep500Error`` whose one line names the path, the cause and what to do, so the run
ends with that line (exit 2) rather than a traceback. Other ``OSError`` s (a missing
folder, a permission) are left as they are: they are no property of the disk.
"""
from __future__ import annotations

import contextlib
import errno
import os

from deep500.utils.errors import Deep500Error

# errno -> (short name, the cause in words; {folder} is the folder of the path)
_CAUSES = {
    errno.ENOSPC: ("ENOSPC", "the disk holding {folder} is full"),
    errno.EDQUOT: ("EDQUOT", "the disk quota for {folder} is used up"),
    errno.EROFS: ("EROFS", "{folder} is on a read-only file system"),
    errno.EFBIG: ("EFBIG", "the file is larger than the file system or the process's "
                           "file size limit (ulimit -f) allows"),
}
STORAGE_ERRNOS = frozenset(_CAUSES)


class StorageError(Deep500Error):
    """A file that could not be written because of its file system (full, over quota,
    read-only, file too large). ``path`` is the file, ``errno`` the cause."""

    def __init__(self, message: str, path: str, error_number: int):
        super().__init__(message)
        self.path, self.errno = path, error_number

    @property
    def no_space(self) -> bool:
        """Whether the file system is out of space (a file that keeps its size may still
        be rewritten in place)."""
        return self.errno in (errno.ENOSPC, errno.EDQUOT)


def storage_error(exc: BaseException, path: str) -> StorageError | None:
    """The StorageError saying why ``path`` could not be written, when ``exc`` is an
    OSError of a full, read-only or size-limited file system; None otherwise."""
    if isinstance(exc, StorageError):
        return exc
    if not isinstance(exc, OSError) or exc.errno not in _CAUSES:
        return None
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    name, cause = _CAUSES[exc.errno]
    advice = ("free space there or give --out a folder on another disk"
              if exc.errno in (errno.ENOSPC, errno.EDQUOT) else
              "give --out a writable folder" if exc.errno == errno.EROFS else
              "raise the limit or give --out a folder on another file system")
    return StorageError(f"cannot write {path}: {cause.format(folder=folder)} ({name}); "
                        f"{advice}; what was written before is kept", path, exc.errno)


@contextlib.contextmanager
def storage_errors_named(path):
    """Within the block, an OSError of a full, read-only or size-limited file system
    becomes the StorageError naming ``path`` (see :func:`storage_error`)."""
    try:
        yield
    except OSError as exc:
        named = storage_error(exc, path)
        if named is None or named is exc:
            raise
        raise named from None
