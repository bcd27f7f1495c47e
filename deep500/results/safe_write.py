"""Writing files inside a run folder without ever writing outside it.

A run folder may hold what someone else put there (``deep500 report DIR`` on a folder
that was copied, shared or tampered with). A symbolic link planted in it must not make
Deep500 write to the link's target, so every report, plot and manifest is written:

- into a new temporary file beside its destination, created with ``O_CREAT | O_EXCL``
  (which never follows a link: an existing name, link or not, fails), then
- renamed over the destination (``rename(2)`` replaces a link at the destination, it
  does not write through it), so a reader also never sees half a file;

and a folder Deep500 writes into (``plots/``, ``tables/``) is refused when it is a
link (:func:`prepare_folder`). The folder the user named may itself be a link: that
is where the user asked for the files.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

from deep500.utils.errors import Deep500Error
from deep500.utils.storage_errors import storage_errors_named


class UnsafePathError(Deep500Error):
    """A path inside a run folder that Deep500 will not write through (a symbolic link
    where it writes a file or a folder)."""


def refuse_link(path: str, what: str) -> None:
    """Raise UnsafePathError when ``path`` is a symbolic link; ``what`` says what
    Deep500 keeps there (e.g. "the report's plots")."""
    if os.path.islink(path):
        raise UnsafePathError(
            f"{path} is a symbolic link (to {os.readlink(path)!r}) where Deep500 writes "
            f"{what}; it writes only inside the run folder: remove the link (or copy the "
            f"folder without it) and try again")


def prepare_folder(path: str, what: str) -> str:
    """The folder ``path`` inside a run folder, created if missing; UnsafePathError when
    it is a symbolic link or not a folder."""
    refuse_link(path, what)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UnsafePathError(f"{path} is a file where Deep500 writes {what} (a folder); "
                              f"move it away and try again")
    os.makedirs(path, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_file(path: str, mode: str = "w"):
    """A new file to write (``mode`` ``"w"``: text in UTF-8, ``"wb"``: bytes) that
    becomes ``path`` when the block ends without an exception, replacing whatever was
    there, a link included, never its target; on an exception it is removed and
    ``path`` is left as it was. A full, read-only or size-limited file system raises
    :class:`deep500.utils.storage_errors.StorageError` naming ``path``."""
    if os.path.isdir(path) and not os.path.islink(path):
        raise UnsafePathError(f"{path} is a folder where Deep500 writes a file; move it "
                              f"away and try again")
    folder = os.path.dirname(os.path.abspath(path))
    with storage_errors_named(path):
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.",
                                         suffix=".tmp")  # O_CREAT | O_EXCL: no link followed
        try:
            os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide reports from the group
            with os.fdopen(fd, mode,
                           **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
                yield handle
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


def write_atomically(path: str, content: str | bytes) -> str:
    """Write ``content`` to ``path`` as :func:`atomic_file` does; return ``path``."""
    with atomic_file(path, "wb" if isinstance(content, bytes) else "w") as handle:
        handle.write(content)
    return path
