"""Reading dataset files so that no file can make a loader read more than a limit.

A small compressed file can expand enormously (gzip shrinks zeros about 1000:1, so a
1.5 MB ``.gz`` holds 1.5 GB): a "decompression bomb". The readers here learn the size
they should get before they read it (from an IDX header, a tar member's header, or the
known size of an official dataset file), refuse a size above its limit, and read in
chunks of at most ``CHUNK_BYTES``, so memory stays within the limit plus one chunk
whatever the file holds. A tar archive whose member headers stop before its
end-of-archive marker (POSIX ustar, IEEE Std 1003.1: two zero blocks) was cut or
damaged; ``tar_end_problem`` says which, where Python's ``tarfile`` silently stops.
Python's ``tarfile`` reads a GNU long-name/long-link or pax extended header whole, as
large as its header claims, before a loader sees the member: archives are opened with
:class:`BoundedTarInfo`, which refuses one above :data:`MAX_TAR_EXTENDED_HEADER`.
"""
from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import tarfile

from deep500.utils.errors import Deep500Error

CHUNK_BYTES = 1 << 20
TAR_BLOCK = 512
# A long name is at most PATH_MAX (4 KiB); a pax header holds a few such records.
MAX_TAR_EXTENDED_HEADER = 1 << 20
# Magic bytes of the compressions a dataset file may use, and the reader of each.
COMPRESSIONS = ((b"\x1f\x8b", "gzip", gzip.GzipFile), (b"BZh", "bzip2", bz2.BZ2File),
                (b"\xfd7zXZ\x00", "xz", lzma.LZMAFile))


@contextlib.contextmanager
def open_decompressed(path: str):
    """Yields (readable binary stream, compression name or ``None``) of ``path``: gzip,
    bzip2 and xz files are decompressed as they are read, recognised by their magic
    bytes whatever their name."""
    with open(path, "rb") as raw:
        magic = raw.read(6)
        raw.seek(0)
        for prefix, name, reader in COMPRESSIONS:
            if magic.startswith(prefix):
                with (reader(fileobj=raw) if reader is gzip.GzipFile else reader(raw)) as stream:
                    yield stream, name
                return
        yield raw, None


def check_size(size: int, limit: int, source: str, what: str, remedy: str) -> None:
    """Raises a Deep500Error naming ``source`` and the limit when ``size`` (bytes that
    ``what`` announces) exceeds ``limit``; sizes are Python ints, so no product wraps."""
    if size > limit:
        raise Deep500Error(f"{source}: {what} announces {size:,} bytes, more than the limit "
                           f"of {limit:,} bytes; refusing to read it (a damaged file or a "
                           f"decompression bomb). {remedy}")


def read_exactly(stream, size: int, source: str) -> bytearray:
    """``size`` bytes from ``stream``, read in chunks into one buffer; a Deep500Error
    says the file is truncated when it ends sooner."""
    buffer = bytearray(size)
    view, done = memoryview(buffer), 0
    while done < size:
        count = stream.readinto(view[done:done + CHUNK_BYTES])
        if not count:
            raise Deep500Error(f"{source}: truncated: it ends after {done:,} of the {size:,} "
                               f"bytes its header announces. Replace it with the original "
                               f"file.")
        done += count
    return buffer


def read_at_most(stream, limit: int, source: str, remedy: str) -> bytes:
    """Everything left in ``stream``, which must be at most ``limit`` bytes: reading
    stops, with a Deep500Error naming ``source`` and the limit, one byte past it."""
    chunks, total = [], 0
    while True:
        chunk = stream.read(min(CHUNK_BYTES, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise Deep500Error(f"{source}: holds more than the limit of {limit:,} bytes; "
                               f"refusing to read further (a damaged file or a "
                               f"decompression bomb). {remedy}")


def tar_end_problem(fileobj, offset: int) -> str | None:
    """Why a tar archive whose ``tarfile`` iteration stopped at byte ``offset`` did not
    end properly, or ``None`` when it did: nothing there, or a zero block (the
    end-of-archive marker, possibly cut short)."""
    fileobj.seek(offset)
    tail = fileobj.read(TAR_BLOCK)
    if not tail.strip(b"\0"):
        return None
    if len(tail) < TAR_BLOCK:
        return (f"the archive is cut inside the header of a member at byte {offset:,} "
                f"(only {len(tail)} of its {TAR_BLOCK} bytes are there); it is truncated")
    return (f"the member header at byte {offset:,} is damaged (not a valid tar header); the "
            f"members after it cannot be read")


class BoundedTarInfo(tarfile.TarInfo):
    """``tarfile.TarInfo`` (give it as ``tarfile.open(..., tarinfo=BoundedTarInfo)``)
    that refuses, with a Deep500Error naming the archive and the byte offset, a GNU
    long-name/long-link or pax extended header announcing more than
    :data:`MAX_TAR_EXTENDED_HEADER` bytes, before ``tarfile`` reads it whole (from a
    compressed archive, a few bytes could announce gigabytes)."""

    def _proc_gnulong(self, tarfile):
        self._check_extended(tarfile, "GNU long-name header")
        return super()._proc_gnulong(tarfile)

    def _proc_pax(self, tarfile):
        self._check_extended(tarfile, "pax extended header")
        return super()._proc_pax(tarfile)

    def _check_extended(self, archive, what: str) -> None:
        source = f"{archive.name or 'the archive'}: the {what} at byte {self.offset:,}"
        check_size(self.size, MAX_TAR_EXTENDED_HEADER, source, "its tar header",
                   "Re-create the archive with 'tar cf', or download it again.")
