"""One run per folder: ``deep500 run --out DIR`` holds ``DIR/.deep500.lock`` (a
``filelock`` lock, taken without waiting) for as long as it runs, refuses a folder that
already holds something unless ``--append`` is given, and keeps the manifest up to
date as records are written.

With ``--append`` the new run is a new *session* of the folder: its records carry
``session`` (0 for the folder's first run) and continue the configuration indices
after the last one on disk, and the manifest describes the new session and lists the
earlier ones under ``sessions``, so nothing earlier is overwritten.
"""
from __future__ import annotations

import datetime
import json
import os
import time

from deep500.results.folder_claims import (LOCK_FILE, check_claimable, in_use_message,
                                           new_run_folder, run_name_component)
from deep500.utils.interrupts import deferred
from deep500.utils.storage_errors import storage_errors_named
from deep500.results.files import (JOB_ENDED_BY, RunFolderError, ResultsWriter,
                                    manifest_lock,
                                    read_manifest, read_results, record_counts,
                                    run_status, session_records, write_manifest)


# Statuses another process may have written into the manifest before this one ends
# (recorded by a failing rank or a watchdog just before the job was aborted).
_FAILURE_STATUSES = ("failed", "timed_out", "interrupted")


def default_run_path(name: str) -> str:
    """A new, empty folder ``results/<name>-<date>-<time>``, created here: ``-2``,
    ``-3``, ... where a run started in the same second took that name (one run per
    folder, decided by ``mkdir``); ``<name>`` made one safe path component
    (:mod:`deep500.results.folder_claims`)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return new_run_folder("results", f"{run_name_component(name)}-{stamp}")


class RunFolder:
    """The run folder as rank 0 holds it: the lock, the results writer, the manifest
    and the counts of what was written. :meth:`claim` takes the folder;
    :meth:`start`, :meth:`write` and :meth:`finish` keep its manifest current."""

    def __init__(self, path: str, lock, session: int, first_index: int,
                 history: list[dict]):
        self.path = path
        self._lock = lock
        self.session = session
        self.first_index = first_index
        self.history = history
        self.manifest: dict = {}
        self.records: list[dict] = []   # this session's, as written
        self._writer = None
        self._started = time.time()

    @classmethod
    def claim(cls, path: str, append: bool = False) -> "RunFolder":
        """Take ``path`` for one run. Raises RunFolderError when another process holds
        it (naming that process) or when it is not empty and ``append`` is false."""
        from filelock import FileLock, Timeout
        from deep500.results.files import process_identity
        check_claimable(path, append)  # a refused folder is left as it was
        if os.path.lexists(path) and not os.path.isdir(path):
            raise RunFolderError(f"--out {path} is a file, not a folder: a run writes a "
                                 f"folder of results; give the path of a new or empty "
                                 f"folder")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as error:  # a file where a parent folder should be, no permission
            raise RunFolderError(f"--out {path}: cannot create the folder "
                                 f"({error.strerror or error}); give a folder you can "
                                 f"create") from None
        lock_path = os.path.join(path, LOCK_FILE)
        lock = FileLock(lock_path)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            raise RunFolderError(in_use_message(path)) from None
        try:
            with storage_errors_named(lock_path), \
                    open(lock_path, "w", encoding="utf-8") as handle:
                json.dump(process_identity(), handle)
            check_claimable(path, append, held=True)  # a run may have begun meanwhile
            entries = [e for e in os.listdir(path) if e != LOCK_FILE]
            previous = read_manifest(path) if entries else {}
            records = read_results(path) if entries else []
        except BaseException:
            lock.release()
            raise
        history = list(previous.get("sessions", []))
        if previous:
            earlier = {k: v for k, v in previous.items() if k != "sessions"}
            status, reason = run_status(earlier)
            if status != earlier.get("status"):  # its process ended without saying so
                earlier.update(status=status, status_note=reason)
            history.append(earlier)
        sessions = [r.get("session", 0) for r in records] + [
            s.get("session", 0) for s in history]
        session = max(sessions) + 1 if sessions else 0
        indices = [r["index"] for r in records if isinstance(r.get("index"), int)]
        return cls(path, lock, session, max(indices) + 1 if indices else 0, history)

    @classmethod
    def join(cls, path: str, session: int, first_index: int) -> "RunFolder":
        """The folder of a session that another process holds and runs, as one part of
        it: the launcher of a rank grid (:mod:`deep500.recipe.rank_grid`) holds the lock
        and the manifest while an ``mpirun`` job per rank count appends that count's
        records. The part writes records and the session's counts into the manifest
        (:meth:`write`); its :meth:`finish` records only a failure, the launcher the
        final status. Raises RunFolderError unless the manifest says ``running`` for
        ``session``."""
        manifest = read_manifest(path)
        if manifest.get("status") != "running" or manifest.get("session", 0) != session:
            raise RunFolderError(
                f"{path}: session {session} is not running there (manifest: session "
                f"{manifest.get('session')}, status {manifest.get('status')}); a part of "
                f"a rank grid is started by 'deep500 run RECIPE', not by hand")
        folder = cls(path, None, session, first_index, list(manifest.get("sessions", [])))
        folder.part = True
        folder.manifest = manifest
        folder.records = session_records(path, session)
        folder._writer = ResultsWriter(path)
        return folder

    part = False  # see join

    def refresh(self) -> None:
        """Read back the manifest and this session's records, as a part (:meth:`join`)
        left them."""
        on_disk = read_manifest(self.path)
        self.manifest.update(on_disk)
        self.records = session_records(self.path, self.session)

    def start(self, manifest: dict) -> None:
        """Open the results file and write the first manifest (``running``)."""
        from deep500.results.files import process_identity
        self.manifest = manifest
        manifest.update(status="running", process=process_identity(),
                        session=self.session, first_index=self.first_index,
                        **record_counts([]))
        if self.history:
            manifest["sessions"] = self.history
        self._writer = ResultsWriter(self.path)
        self._write_manifest()

    def write(self, records: list[dict], **manifest_fields) -> None:
        """Append ``records`` (one configuration's, every rank's) and bring the
        manifest's counts (and ``manifest_fields``) up to date."""
        # A configuration's records and counts land together: no signal between them,
        # and no rank's MPI_Abort (it waits for this lock; files.hold_until_the_job_ends).
        with deferred(), manifest_lock(self.path):
            if self._job_ending():
                return
            for record in records:
                self._writer.write(record)
                self.records.append(record)
            self.manifest.update(manifest_fields)
            self._write_manifest()

    def finish(self, status: str, **manifest_fields) -> None:
        """The final manifest (``status``, counts, duration); releases the folder. A
        failure another process recorded in the manifest meanwhile is kept."""
        if self.part:  # the launcher finishes the manifest; a part records a failure
            if self._writer is not None:
                self._writer.close()
            if status != "complete":
                self.manifest.update(status=status, **manifest_fields)
                self._write_manifest()
            return
        try:
            if self._writer is not None:
                self._writer.close()
            self.manifest.update(status=status, duration_s=time.time() - self._started,
                                 finished=datetime.datetime.now().astimezone().isoformat(),
                                 **manifest_fields)
            self._write_manifest()
        finally:
            self.release()

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _job_ending(self) -> bool:
        """Another rank has begun to end the job (its MPI_Abort may kill this process
        at any moment): what it left on disk is the run's end."""
        try:
            return read_manifest(self.path).get(JOB_ENDED_BY) is not None
        except RunFolderError:
            return False

    def _write_manifest(self) -> None:
        # Under the lock ranks recording a failure take: read, count and write at once.
        with manifest_lock(self.path):
            try:
                on_disk = read_manifest(self.path)
            except RunFolderError:
                on_disk = {}
            counts = record_counts(self.records)
            if (on_disk.get("status") in _FAILURE_STATUSES and "failure" in on_disk
                    and on_disk.get("session", 0) == self.session):
                # another rank recorded its failure (and its own error record) meanwhile
                self.manifest.update(status=on_disk["status"], failure=on_disk["failure"])
                counts = record_counts(session_records(self.path, self.session))
            self.manifest.update(counts)
            write_manifest(self.path, self.manifest)
