"""Results on disk: ``results.jsonl`` appended and flushed as each measurement ends (a
crash keeps what was measured) and ``manifest.json`` describing the run.

Every line of ``results.jsonl`` is written by one ``write(2)`` on a descriptor opened
with ``O_APPEND``, so lines written by different processes (rank 0, and a rank that
records its own failure before the job is aborted) never interleave: POSIX makes each
such write land whole at the end of the file (POSIX.1-2017, ``write()``: "the file
offset shall be set to the end of the file prior to each write and no intervening file
modification operation shall occur"). This holds on a local file system; NFS does not
promise it across hosts.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import threading

from deep500.results.safe_write import atomic_file
from deep500.utils.errors import Deep500Error
from deep500.utils.interrupts import deferred
from deep500.utils.metric import to_jsonable
from deep500.utils.storage_errors import StorageError, storage_error, storage_errors_named

RESULTS_FILE = "results.jsonl"
MANIFEST_FILE = "manifest.json"


class RunFolderError(Deep500Error):
    """A run folder that cannot be used: taken by another run, not empty, not a run
    folder, or with a manifest or results that cannot be read."""


def _append_line(fd: int, record: dict, path: str) -> None:
    """Append ``record``'s line at ``fd`` (the file ``path``); a line the file system
    could not take whole is cut off again, so the file ends with the last whole record,
    and a StorageError names ``path`` and the cause."""
    data = (json.dumps(to_jsonable(record)) + "\n").encode("utf-8")
    end = os.lseek(fd, 0, os.SEEK_END)
    try:
        written = os.write(fd, data)
        while written < len(data):  # a regular file writes whole unless the disk is full
            written += os.write(fd, data[written:])
        os.fsync(fd)
    except OSError as exc:
        named = storage_error(exc, path)
        if named is None:
            raise
        with contextlib.suppress(OSError):  # a shorter file needs no space
            if os.fstat(fd).st_size > end:
                os.ftruncate(fd, end)
        raise named from None


def _open_for_append(output_dir: str) -> int:
    path = os.path.join(output_dir, RESULTS_FILE)
    # O_NOFOLLOW: a link planted at the name is refused (ELOOP), never appended through
    with storage_errors_named(path):
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)


class ResultsWriter:
    """Appends one JSON object per line and forces it to disk before returning."""

    def __init__(self, output_dir: str):
        self.path = os.path.join(output_dir, RESULTS_FILE)
        self._fd = _open_for_append(output_dir)

    def write(self, record: dict) -> None:
        with deferred():  # a signal does not cut a line in two
            _append_line(self._fd, record, self.path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def append_record(output_dir: str, record: dict) -> None:
    """Append one record to the run's ``results.jsonl`` from any process (a failing
    rank, a watchdog thread); see the module docstring."""
    fd = _open_for_append(output_dir)
    try:
        _append_line(fd, record, os.path.join(output_dir, RESULTS_FILE))
    finally:
        os.close(fd)


def _read_lines(output_dir: str):
    """(line number, record or None when the line is not a JSON object with a kind)."""
    path = os.path.join(output_dir, RESULTS_FILE)
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
                record = None
            yield number, record


def read_results(output_dir: str) -> list[dict]:
    """Every complete record of a run; a line cut off by a crash is skipped."""
    return [record for _, record in _read_lines(output_dir) if record is not None]


def write_manifest(output_dir: str, manifest: dict) -> str:
    """Write ``manifest.json`` atomically (a reader never sees half a file), through a
    temporary file of its own (another rank may write it too) and never through a
    link planted at its name (:mod:`deep500.results.safe_write`). On a file system out
    of space, the manifest is rewritten in place where its blocks hold the new text
    (:func:`_rewrite_in_place`), so a run that fills the disk still ends with a final
    manifest; StorageError otherwise."""
    path = os.path.join(output_dir, MANIFEST_FILE)
    text = json.dumps(to_jsonable(manifest), indent=2)
    with deferred():
        try:
            with atomic_file(path) as handle:
                handle.write(text)
        except StorageError as exc:
            if not (exc.no_space and _rewrite_in_place(path, text.encode("utf-8"))):
                raise
    return path


def _rewrite_in_place(path: str, data: bytes) -> bool:
    """Overwrite the file ``path`` with ``data`` when its allocated blocks hold them
    (a file system out of space still lets a file be rewritten within its blocks);
    whether it was. On a failure the old content is put back (it fit those blocks). A
    reader may see the file half-written meanwhile: the last resort of a full disk."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if len(data) > info.st_blocks * 512 or info.st_size > 1 << 24:
            return False
        old = os.pread(fd, info.st_size, 0)
        try:
            if os.pwrite(fd, data, 0) != len(data):
                raise OSError(errno.ENOSPC, "short write")
            os.ftruncate(fd, len(data))
            os.fsync(fd)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                os.pwrite(fd, old, 0)
                os.ftruncate(fd, len(old))
            return False
    finally:
        os.close(fd)


def read_manifest(output_dir: str) -> dict:
    """The run's manifest; ``{}`` when there is none. Raises RunFolderError when it is
    not a JSON object."""
    path = os.path.join(output_dir, MANIFEST_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFolderError(f"{path} is not valid JSON ({exc}); the run's records in "
                             f"{RESULTS_FILE} are independent of it: move the manifest "
                             f"away to rebuild the report from them") from None
    if not isinstance(manifest, dict):
        raise RunFolderError(f"{path}: a manifest is a JSON object, got "
                             f"{type(manifest).__name__}")
    return manifest


def check_run_folder(output_dir: str, records: bool = True) -> None:
    """Raise RunFolderError, saying what is wrong, unless ``output_dir`` is a run folder
    whose manifest and records can be read. A last line cut off by a crash is allowed
    (:func:`read_results` skips it); any other line that is not a record is not.
    ``records=False``: the folder and its manifest only, for a reader that checks the
    lines as it streams them (:func:`iter_checked_records`), so they are parsed once."""
    if not os.path.exists(output_dir):
        raise RunFolderError(f"{output_dir}: no such folder; give the folder that "
                             f"'deep500 run --out' wrote")
    if not os.path.isdir(output_dir):
        raise RunFolderError(f"{output_dir} is not a folder; give the folder that "
                             f"'deep500 run --out' wrote")
    has_results = os.path.isfile(os.path.join(output_dir, RESULTS_FILE))
    if not os.path.isfile(os.path.join(output_dir, MANIFEST_FILE)) and not has_results:
        raise RunFolderError(f"{output_dir} is not a run folder: it has neither "
                             f"{MANIFEST_FILE} nor {RESULTS_FILE}")
    read_manifest(output_dir)
    if records:
        for _ in iter_checked_records(output_dir):
            pass


def iter_checked_records(output_dir: str):
    """The run's records, one at a time (none held), each shaped as ``deep500 run``
    writes them; raises RunFolderError once the file is read when a line other than
    the last (cut off by a crash, skipped) is not such a record."""
    lines = bad = 0
    shown: list[int] = []
    last_bad = False
    for number, record in _read_lines(output_dir):
        lines += 1
        last_bad = record is None or not _shaped_like_a_record(record)
        if last_bad:
            bad += 1
            if len(shown) < 6:
                shown.append(number)
            continue
        yield record
    if bad and not (bad == 1 and last_bad):
        text = ", ".join(map(str, shown[:5])) + (" ..." if bad > 5 else "")
        raise RunFolderError(f"{os.path.join(output_dir, RESULTS_FILE)}: line(s) {text} "
                             f"are not results (one JSON object per line, with the kind, "
                             f"level, index and configuration of a record); "
                             f"{lines - bad} of {lines} lines are")


_RECORD_FIELDS = {"level": int, "index": int, "configuration": dict}


def _shaped_like_a_record(record: dict) -> bool:
    """What every record ``deep500 run`` writes has, and the report relies on."""
    if record["kind"] not in ("measurement", "error", "skipped"):
        return False
    if any(not isinstance(record.get(k), t) or isinstance(record.get(k), bool)
           for k, t in _RECORD_FIELDS.items()):
        return False
    return record["kind"] != "measurement" or isinstance(record.get("result"), dict)


def record_counts(records: list[dict]) -> dict:
    """The manifest's counts of what a run wrote: ``records`` (lines, one per rank per
    configuration), ``records_by_kind``, and ``configurations_recorded`` (configurations
    with at least one record)."""
    by_kind: dict[str, int] = {}
    for record in records:
        by_kind[record.get("kind")] = by_kind.get(record.get("kind"), 0) + 1
    return {"configurations_recorded": len({r.get("index") for r in records}),
            "records": len(records), "records_by_kind": by_kind,
            "measurements": len(records)}


def session_records(output_dir: str, session: int) -> list[dict]:
    """The records of one session of a run folder (see ``deep500 run --append``)."""
    return [r for r in read_results(output_dir) if r.get("session", 0) == session]


# output folder -> the record of the configuration this process is measuring there
_IN_PROGRESS: dict[str, dict] = {}


@contextlib.contextmanager
def configuration_in_progress(output_dir: str, record: dict):
    """Within the block, ``record`` (index, rank, configuration) describes what this
    process is measuring in ``output_dir``; :func:`record_failure` turns it into an
    error record if the process fails before the block ends."""
    key = os.path.abspath(output_dir)
    _IN_PROGRESS[key] = record
    try:
        yield record
    finally:
        _IN_PROGRESS.pop(key, None)


def record_failure(output_dir: str, rank: int, error: str, status: str = "failed",
                   traceback_text: str | None = None, note: str | None = None,
                   record_fields: dict | None = None,
                   manifest_fields: dict | None = None) -> None:
    """Record, from the process that fails, before the job ends: the configuration it
    was measuring becomes an error record (``error``, plus ``record_fields``) in
    ``results.jsonl``, and a manifest still ``running`` gets ``status``, a ``failure``
    entry (rank, error, configuration, traceback, note), ``manifest_fields`` and the
    counts of the records on disk. A manifest that already failed keeps its first
    failure (the one reported) and gets the counts brought up to date; one that
    finished otherwise is left as it is. Once a rank has begun to end the job
    (:func:`hold_until_the_job_ends`) nothing is added: this process may be killed at
    any moment, between a record and its count."""
    in_progress = _IN_PROGRESS.get(os.path.abspath(output_dir))
    # Ranks that fail together (both watchdogs of a hung collective) serialise here, so
    # the manifest's counts include every rank's error record.
    with manifest_lock(output_dir):
        manifest = read_manifest(output_dir)
        if manifest.get(JOB_ENDED_BY) is not None:
            return
        if in_progress is not None:
            append_record(output_dir, {**in_progress, "kind": "error", "error": error,
                                       "rank": rank, **(record_fields or {})})
        if not manifest:
            return
        counts = record_counts(session_records(output_dir, manifest.get("session", 0)))
        if manifest.get("status") != "running":
            if manifest.get("status") in ("failed", "timed_out", "interrupted"):
                manifest.update(**counts)   # the first failure stays the one reported
                write_manifest(output_dir, manifest)
            return
        failure = {"rank": rank, "error": error}
        if in_progress is not None:
            failure["index"] = in_progress.get("index")
            failure["configuration"] = in_progress.get("label")
        if traceback_text:
            failure["traceback"] = traceback_text
        if note:
            failure["note"] = note
        manifest.update(status=status, failure=failure, **(manifest_fields or {}),
                        **counts)
        write_manifest(output_dir, manifest)


#: The manifest's key naming the rank that is ending the job (``MPI_Abort``).
JOB_ENDED_BY = "job_ended_by"
_held = threading.local()


@contextlib.contextmanager
def manifest_lock(output_dir: str):
    """An exclusive lock between the processes that update ``output_dir``'s manifest
    (rank 0's run folder, ranks recording their failures): ``fcntl.flock`` on the
    folder itself, which adds no file to it (where there is no flock, no lock).
    Without it, rank 0 could read the manifest, another rank then append its error
    record and count it, and rank 0 write back counts without it. Re-entrant within
    a thread; other threads of the process wait for it as other processes do."""
    key = os.path.abspath(output_dir)
    held = _held.__dict__.setdefault("paths", {})
    if key in held:
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    fd = _lock_folder(output_dir)
    held[key] = 1
    try:
        yield
    finally:
        del held[key]
        if fd is not None:
            os.close(fd)   # releases the lock


def _lock_folder(output_dir: str) -> int | None:
    """The folder opened and ``flock``-ed exclusively (blocking); None where there is
    no flock or no folder."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    try:
        fd = os.open(output_dir, os.O_RDONLY)
    except OSError:
        return None
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def hold_until_the_job_ends(output_dir: str, rank: int) -> None:
    """Called by a rank just before it ends the whole job (``MPI_Abort``, which kills
    every rank wherever it is): take the manifest's lock and keep it until this process
    dies, and mark the manifest with ``job_ended_by``. MPI_Abort then never kills
    another rank between appending a record and counting it (that rank holds the lock,
    so this one waits), and a rank that gets the lock after this one died adds nothing
    (:func:`record_failure`, ``RunFolder.write``): the counts always match the disk."""
    key = os.path.abspath(output_dir)
    held = _held.__dict__.setdefault("paths", {})
    if key not in held:
        fd = _lock_folder(output_dir)
        if fd is None:
            return
        held[key] = 1   # never released: the process ends holding it
    try:
        manifest = read_manifest(output_dir)
    except RunFolderError:
        return
    # A run that already finished (complete, or another process's final status) is
    # not this job's to mark.
    ending = manifest.get("status") in ("running", "failed", "timed_out", "interrupted")
    if ending and manifest.get(JOB_ENDED_BY) is None:
        manifest[JOB_ENDED_BY] = rank
        write_manifest(output_dir, manifest)


def mark_run_failed(output_dir: str, rank: int, message: str,
                    ending_the_job: bool = False) -> None:
    """Record that ``rank`` failed (``message``: its traceback), as
    :func:`record_failure` does. Called by the failing rank (``guarded_main``'s
    ``on_failure``) just before ``MPI_Abort`` ends every rank, rank 0 included, which
    then never writes its final status; ``ending_the_job``: this process is about to
    call it (:func:`hold_until_the_job_ends`)."""
    lines = message.strip().splitlines()
    record_failure(output_dir, rank, lines[-1] if lines else message,
                   traceback_text="\n".join(lines[-40:]),
                   note="mpirun ended every rank; results written before the failure "
                        "are kept")
    if ending_the_job:
        hold_until_the_job_ends(output_dir, rank)


def process_identity() -> dict:
    """This process as the manifest names it: pid, host and start time (seconds since
    the epoch, as ``psutil.Process.create_time``), which tell it apart from a later
    process given the same pid."""
    import psutil
    return {"pid": os.getpid(), "hostname": platform.node(),
            "started": psutil.Process().create_time()}


def process_alive(identity: dict) -> bool | None:
    """Whether the process ``identity`` names still runs: None when it ran on another
    host (it cannot be checked from here)."""
    import psutil
    if not identity or identity.get("hostname") != platform.node():
        return None
    try:
        started = psutil.Process(int(identity["pid"])).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, TypeError, ValueError):
        return False
    return abs(started - float(identity.get("started", started))) < 1.0


def run_status(manifest: dict) -> tuple[str | None, str | None]:
    """The status a report shows, and why it differs from the manifest's, if it does: a
    manifest still ``running`` whose process has ended (killed, or the machine went
    down) is ``interrupted``. The manifest itself is not rewritten: the report is a
    view, and a process on another host may still be writing it."""
    status = manifest.get("status")
    if status != "running":
        return status, None
    process = manifest.get("process") or {}
    alive = process_alive(process)
    if alive is False:
        return "interrupted", (f"process {process.get('pid')} on {process.get('hostname')} "
                               f"ended without finishing the manifest")
    if alive is None and process:
        return status, (f"on {process.get('hostname')}, process {process.get('pid')}; "
                        f"cannot be checked from this host")
    return status, None
