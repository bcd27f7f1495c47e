"""How a launcher ends a run that it ran under ``mpirun`` (``deep500 run --np N``,
:mod:`deep500.recipe.launcher`, and each part of a rank grid,
:mod:`deep500.recipe.rank_grid`; see ``docs/run_lifecycle.md``).

The launcher holds the run folder and outlives ``mpirun``, so it writes the manifest's
final state from what it saw, whatever became of the ranks:

- the job's ranks recorded a failure (``failed``, ``timed_out``, ``interrupted``, with
  its ``failure``): kept, they said why;
- the job ran to its end (``mpirun`` exit status 0 or 1): the launcher goes on;
- otherwise the first rank that ended of itself, as its watcher saw it
  (:mod:`deep500.lv3_distributed.rank_watch`): ``failed`` with ``rank R ... exited
  with status S`` or ``was ended by signal K``, and one line on stderr naming it; else
  ``mpirun``'s own exit status.

Then, however the run ended (an interrupt of the launcher included), the manifest is
finished with the counts of the records on disk, the run is stored and its report is
written (:func:`finalize`).
"""
from __future__ import annotations

import os
import sys

from deep500.lv3_distributed.mpi_launch import run_under_mpirun
from deep500.lv3_distributed.rank_watch import describe, read_endings, watched
from deep500.results.run_folder import RunFolder

#: Where the ranks' watchers record how they ended, in the run folder, until the
#: launcher has read it.
ENDINGS_FILE = ".deep500-rank-endings.jsonl"

# mpirun exit statuses of a job that ran to its end: 0 everything measured and
# accepted, 1 some configuration failed or missed a threshold (recorded).
JOB_RAN = (0, 1)
FAILURE_STATUSES = ("failed", "timed_out", "interrupted")
# Exit statuses that deep500 run gives with a message of its own: it ran (0, 1), a
# Deep500Error (2), a timeout (124), SIGINT or SIGTERM (130, 143).
_SAID_WHY = (0, 1, 2, 124, 130, 143)


def run_job(folder: RunFolder, ranks: int, program: list, mpirun_args=(),
            environment: dict | None = None) -> tuple[int, tuple | None]:
    """Run ``python <program>`` on ``ranks`` ranks under ``mpirun``, each rank watched,
    and read back what the job left in ``folder``. Returns ``mpirun``'s exit status and
    the session's final status when the job did not run to its end (None when it
    did; see the module docstring). An interrupt of this process is passed on to
    ``mpirun`` (:func:`deep500.lv3_distributed.mpi_launch.run_under_mpirun`) and
    raised once the job has ended and its records are read back."""
    endings_path = os.path.join(folder.path, ENDINGS_FILE)
    _remove(endings_path)
    status = None  # stays None when this process is interrupted
    try:
        status = run_under_mpirun(ranks, watched([sys.executable, *program], endings_path),
                                  mpirun_args, environment)
    finally:
        endings = read_endings(endings_path)
        _remove(endings_path)
        folder.refresh()  # the job's records and counts
        if endings and status not in JOB_RAN:  # a rank's exit 1 of a job that ran: no news
            folder.manifest["rank_endings"] = [{**e, "text": describe(e)} for e in endings]
    return status, job_ending(folder, status, endings, ranks)


def job_ending(folder: RunFolder, status: int, endings: list[dict],
               ranks: int) -> tuple | None:
    """The session's final status (as :func:`deep500.recipe.manifest.final_status`
    gives it) for a job that ended with ``mpirun`` exit status ``status`` and the
    ranks' ``endings``, or None when it ran to its end. Prints one line per rank that
    ended without saying why."""
    silent = [e for e in endings
              if e.get("signal") is not None or e.get("status") not in _SAID_WHY]
    for ending in silent:
        sys.stderr.write(f"deep500: {describe(ending)}, without recording why; results "
                         f"written before it are kept in {folder.path}\n")
    on_disk = folder.manifest.get("status")
    if on_disk in FAILURE_STATUSES:  # its ranks recorded why
        return (on_disk,)
    if status in JOB_RAN:
        return None
    if silent or endings:
        first = (silent or endings)[0]
        failure = {"rank": first["rank"], "error": describe(first),
                   "pid": first.get("pid"), "host": first.get("host")}
        failure.update({k: first[k] for k in ("signal", "status") if k in first})
    else:
        failure = {"rank": None, "error": f"mpirun -np {ranks} exited with status "
                                          f"{status} without recording a failure"}
    return ("failed", {"failure": failure})


def finalize(folder: RunFolder, final: tuple, database: str | None,
             write_report: bool) -> tuple:
    """Finish the manifest with ``final`` (the counts of the records on disk), store
    the run in ``database`` (if given) and write its report (if ``write_report``),
    each however the one before went. Returns (the stored run's id or None, the
    report's paths)."""
    stored, reports = None, []
    try:
        folder.finish(final[0], **(final[1] if len(final) > 1 else {}))
    finally:
        if database is not None:
            from deep500.store import store_run_or_warn
            stored = store_run_or_warn(folder.path, database)
        if write_report:
            reports = write_report_or_warn(folder.path)
    return stored, reports


def write_report_or_warn(output_dir: str) -> list:
    """The run's report (:func:`deep500.report.write_reports`); a report that cannot
    be written warns and leaves the folder as it is (the records and the manifest are
    what was measured)."""
    from deep500.report import write_reports
    try:
        return write_reports(output_dir)
    except Exception as problem:  # noqa: BLE001 - the run's records matter more
        sys.stderr.write(f"deep500: the report of {output_dir} could not be written "
                         f"({type(problem).__name__}: {problem}); its records are kept: "
                         f"'deep500 report {output_dir}' tries again\n")
        return []


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
