"""Running a recipe: check it, measure every configuration, write results as they come,
then the report.

Under ``mpirun -np N deep500 run ...`` every rank measures every configuration; rank 0
gathers each measurement from all ranks and writes it.

What reaches disk, whatever happens (``docs/run_lifecycle.md``):

- rank 0 takes the run folder (:class:`deep500.results.run_folder.RunFolder`: one run per
  folder) and writes the manifest, ``running``, before any rank measures anything;
- a configuration that raises is an error record and the next one runs; where the
  ranks measure together (a collective experiment) and one rank raises, that rank
  writes its error record and marks the manifest ``failed`` before the job is aborted;
- SIGINT and SIGTERM finish the manifest as ``interrupted`` with the counts of what was
  written (exit status 130 and 143, from ``deep500 run``);
- a recipe's ``timeout`` (seconds per configuration) ends every rank of a configuration
  that runs longer, after an error record with ``timeout: true`` and a ``timed_out``
  manifest (:mod:`deep500.recipe.watchdog`).

A recipe that names its numbers of ranks (``ranks``, fixed or mutable) is run by
:mod:`deep500.recipe.rank_grid`: this process holds the folder and launches one
``mpirun -np R`` job per rank count, each running that count's configurations into the
same session of the folder.
"""
from __future__ import annotations

import datetime
import functools
import os
import sys
import time
import traceback
import warnings
from dataclasses import dataclass

from deep500.lv3_distributed.mpi_launch import (LateRanks, abort_job, gather_to_root,
                                                in_mpi_world, world_communicator)
from deep500.recipe import machine_file, rank_grid
from deep500.recipe.remeasure import measure_watched
from deep500.results.files import (RunFolderError, configuration_in_progress,
                                    record_failure)
from deep500.results.run_folder import RunFolder
from deep500.recipe.schema import Recipe, load_recipe
from deep500.recipe.watchdog import TIMEOUT_EXIT_STATUS, Watchdog
from deep500.report.records import Counts, count_outcomes
from deep500.utils import sysinfo
from deep500.utils.allocator import fix_allocator_thresholds
from deep500.utils.errors import Deep500Error
from deep500.utils.threads import set_thread_counts, thread_conditions
from deep500.utils.wallclock import UnstableMeasurementWarning


@dataclass
class RunSummary:
    output_dir: str
    measurements: int
    errors: int
    acceptance_failures: int
    report_paths: list
    run_id: int | None = None  # in the results database, when stored
    counts: Counts | None = None  # as the report counts them (rank 0)
    # A rank grid whose mpirun job for some rank count failed: the exit status that
    # deep500 run gives (that job's; 124 for a timeout), after the report is written.
    exit_status: int | None = None

    @property
    def ok(self) -> bool:
        return self.errors == 0 and self.acceptance_failures == 0

    def sentence(self) -> str:
        """The counts line ``deep500 run`` prints, the report's own first line."""
        if self.counts is not None:
            return self.counts.sentence()
        return (f"{self.measurements} configurations measured, {self.errors} failed to "
                f"run, {self.acceptance_failures} missed an acceptance threshold")


def default_output_dir(recipe: Recipe) -> str:
    """``results/<recipe>-<date>-<time>``, with ``-2``, ``-3``, ... where a run started
    in the same second took that name (one run per folder)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join("results", f"{recipe.name}-{stamp}")
    path, number = base, 1
    while os.path.exists(path):
        number += 1
        path = f"{base}-{number}"
    return path


def load_run_recipe(path: str, machine: str | None = None) -> Recipe:
    """The checked recipe at ``path`` with its machine file: ``machine`` (a path from
    the working directory, or a shipped machine's name; ``deep500 run --machine``)
    replaces the recipe's own ``machine:``. A recipe problem raises RecipeError, a
    machine file that does not load MachineError (both Deep500Errors: exit status 2),
    before anything runs."""
    recipe = load_recipe(path)
    if machine is not None:
        recipe.machine, recipe.machine_path = machine_file.load(machine)
        recipe.machine_given_by = "--machine"
    return recipe


def run_recipe(path: str, output_dir: str | None = None, argv: list | None = None,
               progress: bool = True, write_report: bool = True,
               remeasure_interfered: int = 0, interference_rule=None,
               append: bool = False, database: str | None = None,
               machine: str | None = None, mpirun_args: list | None = None) -> RunSummary:
    """Run the recipe at ``path``; see the module docstring.

    ``output_dir`` must be new or empty unless ``append`` (a new session in the folder,
    see :mod:`deep500.results.run_folder`); RunFolderError (on every rank) otherwise.

    Every configuration is measured under the telemetry sampler; one judged interfered
    (by ``interference_rule``, default :class:`deep500.utils.telemetry.InterferenceRule`)
    is re-measured up to ``remeasure_interfered`` times (see
    :func:`deep500.recipe.remeasure.measure_watched`).

    With ``database`` (a path), rank 0 also stores the run in that results database
    when the run ends, however it ends (:mod:`deep500.store`); a failure to store warns
    and leaves the folder as it is.

    ``machine``: a machine file for the experiments (``recipe.machine``), replacing
    the recipe's ``machine:`` (see :func:`load_run_recipe`); the manifest records it.

    A recipe with ``ranks`` outside ``mpirun`` launches each rank count under
    ``mpirun`` (:func:`deep500.recipe.rank_grid.run_grid`, with ``mpirun_args``, e.g. a
    hostfile's ``-f FILE``); under ``mpirun`` its only rank count must be the world's
    size (:func:`deep500.recipe.rank_grid.check_launch`)."""
    allocator = fix_allocator_thresholds()  # before anything big is allocated
    recipe = load_run_recipe(path, machine)  # every check happens before any work
    comm = world_communicator()
    rank, size = (comm.Get_rank(), comm.Get_size()) if comm else (0, 1)
    part = rank_grid.current_part()
    if recipe.rank_counts() is not None and part is None and not in_mpi_world():
        return rank_grid.run_grid(recipe, output_dir, argv, progress, remeasure_interfered,
                                  append, database, machine, write_report, mpirun_args)
    rank_grid.check_launch(recipe, size)
    # (position in the recipe's plan, configuration): a part of a rank grid runs its
    # rank count's configurations under their indices in the whole plan
    configurations = [(p, c) for p, c in enumerate(recipe.configurations())
                      if part is None or c.get("ranks") == part.ranks]
    folder, problem = None, None
    if rank == 0:
        output_dir = part.output_dir if part else (output_dir or default_output_dir(recipe))
        try:
            folder = (RunFolder.join(output_dir, part.session, part.first_index) if part
                      else RunFolder.claim(output_dir, append))
        except RunFolderError as exc:
            if comm is None:
                raise
            problem = exc
        if folder is not None and part is None:
            # Before any rank starts (they wait in the bcast below): whichever rank
            # fails first, the manifest is on disk.
            folder.start(_manifest(recipe, argv, size, len(configurations), allocator))
    if comm:
        shared = (output_dir, folder and folder.session, folder and folder.first_index,
                  problem and str(problem))
        output_dir, session, first_index, message = comm.bcast(shared, root=0)
        if message:  # every rank stops alike, with nothing run
            raise problem if problem is not None else RunFolderError(message)
        records_comm = comm.Dup()  # the records' messages meet no other receive
    else:
        session, first_index, records_comm = folder.session, folder.first_index, None

    state = recipe.kind.new_state()
    errors = failures = done = 0
    written = []  # (kind, index, session, passed) of each record on disk, for the counts
    watchdog = (Watchdog(recipe.timeout, functools.partial(
        _timed_out, output_dir, rank, comm, recipe.timeout)) if recipe.timeout else None)
    bar = _progress(configurations, recipe.name + (f" ({size} ranks)" if part else ""),
                    enabled=progress and rank == 0)
    loaded = sysinfo.loaded_frameworks()
    outcome = stored = None
    try:
        for position, configuration in bar:
            index = first_index + position
            label = configuration_label(recipe, configuration)
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(label)  # drawn now: shown while it runs
            header = {**_record_header(recipe, configuration, index, rank, size),
                      "label": label, "session": session}
            started = time.monotonic()
            with configuration_in_progress(output_dir, header):
                try:
                    with watchdog.watch(header) if watchdog else _nothing():
                        record = _measure(recipe, configuration, index, output_dir, state,
                                          rank, size, remeasure_interfered,
                                          interference_rule)
                except Exception:
                    # An error _measure does not record (one rank of a collective
                    # measurement, which the others wait for): its error record, while
                    # the configuration is known; then guarded_main aborts the job.
                    _record_failure(output_dir, rank, comm)
                    raise
            record.update(label=label, session=session)
            records = [record]
            if comm:
                deadline = (started + recipe.timeout + _late_grace(recipe.timeout)
                            if recipe.timeout else None)
                try:
                    records = gather_to_root(records_comm, record, deadline)
                except LateRanks as late:  # rank 0 only
                    _ranks_timed_out(folder, late, header, recipe.timeout, comm)
            done += 1
            if rank == 0:
                if sysinfo.loaded_frameworks() != loaded:  # cheap only when read here
                    loaded = sysinfo.loaded_frameworks()
                    folder.manifest["threads"]["in_force_after_loading"] = \
                        sysinfo.framework_threads(imported_only=True)
                folder.write(records)
                written += [{key: item.get(key) for key in
                             ("kind", "index", "session", "passed")} for item in records]
                # per configuration, not per rank: one failed scheme is one failure
                errors += any(item["kind"] == "error" for item in records)
                failures += any(item["kind"] == "measurement" and not item["passed"]
                                for item in records)
    except BaseException as exc:
        outcome = exc
        if rank != 0:  # says why it stops before the job is aborted; rank 0 below
            _record_failure(output_dir, rank, comm)
        raise
    finally:
        if watchdog is not None:
            watchdog.close()
        if rank == 0:
            status, *fields = _final_status(outcome, rank)
            folder.finish(status, **(fields[0] if fields else {}))
            if database is not None and part is None:
                from deep500.store import store_run_or_warn
                stored = store_run_or_warn(output_dir, database)
    if records_comm is not None:
        records_comm.Free()
    reports = []
    if rank == 0 and write_report and part is None:
        from deep500.report import write_reports
        reports = write_reports(output_dir)
    if rank != 0:
        return RunSummary(output_dir, done, errors, failures, reports, stored)
    # One definition of the counts for the command line and the report, per
    # configuration: skipped ones are not "measured".
    counts = count_outcomes(written)
    return RunSummary(output_dir, counts.measured, counts.failed,
                      counts.acceptance_failures, reports, stored, counts)


def _final_status(outcome: BaseException | None, rank: int) -> tuple:
    """The manifest's final status (and its ``failure`` entry) for how the loop ended."""
    if outcome is None:
        return ("complete",)
    if isinstance(outcome, KeyboardInterrupt):  # SIGINT, or SIGTERM (Interrupted)
        return ("interrupted",)
    return ("failed", {"failure": {"rank": rank,
                                   "error": f"{type(outcome).__name__}: {outcome}"}})


def _record_failure(output_dir: str, rank: int, comm) -> None:
    """Record the exception being handled on this rank (see
    :func:`deep500.results.files.record_failure`); an interrupt is no error of the
    configuration, only the manifest's ``interrupted``."""
    exc = sys.exc_info()[1]
    try:
        if isinstance(exc, KeyboardInterrupt):
            record_failure(output_dir, rank, str(exc) or "KeyboardInterrupt",
                           status="interrupted")
        elif not isinstance(exc, SystemExit) or exc.code not in (None, 0):
            lines = traceback.format_exc().strip().splitlines()
            record_failure(output_dir, rank, f"{type(exc).__name__}: {exc}",
                           traceback_text="\n".join(lines[-40:]),
                           note="mpirun ended every rank; results written before the "
                                "failure are kept" if comm is not None else None)
    except Exception as problem:  # noqa: BLE001 - the failure itself matters more
        sys.stderr.write(f"deep500: rank {rank} could not record its failure: "
                         f"{problem!r}\n")


def _late_grace(timeout: float) -> float:
    """How much longer than ``timeout`` rank 0 waits for another rank's records: the
    late rank's own watchdog normally ends the job first, with the better message."""
    return max(2.0, 0.1 * timeout)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _timed_out(output_dir: str, rank: int, comm, timeout: float, header: dict,
               seconds: float) -> None:
    """The watchdog's action on this rank: say which configuration and rank, record it,
    end every rank."""
    message = (f"configuration {header['index']} ({header['label']}) did not finish "
               f"within {timeout:g} s on rank {rank}; the recipe's timeout ends every rank. "
               f"Results written before it are kept in {output_dir}")
    sys.stderr.write(f"\ndeep500: timeout: {message}\n")
    try:
        record_failure(output_dir, rank, f"TimeoutError: {message}", status="timed_out",
                       record_fields={"timeout": True, "timeout_s": timeout,
                                      "seconds": round(seconds, 3)})
    except Exception as problem:  # noqa: BLE001 - ending the job matters more
        sys.stderr.write(f"deep500: could not record the timeout: {problem!r}\n")
    abort_job(comm, TIMEOUT_EXIT_STATUS)


def _ranks_timed_out(folder: RunFolder, late: LateRanks, header: dict, timeout: float,
                     comm) -> None:
    """Rank 0 waited past the timeout for other ranks' records: keep what arrived,
    record the late ranks' configuration as errors, end every rank."""
    message = (f"configuration {header['index']} ({header['label']}): rank(s) "
               f"{late.missing} did not finish within {timeout:g} s (rank 0 waited "
               f"{timeout + _late_grace(timeout):g} s for their results); the recipe's "
               f"timeout ends every rank. Results written before it are kept in "
               f"{folder.path}")
    sys.stderr.write(f"\ndeep500: timeout: {message}\n")
    received = [r for r in late.received if r is not None]
    errors = [{**header, "rank": missing, "kind": "error",
               "error": f"TimeoutError: {message}", "timeout": True, "timeout_s": timeout}
              for missing in late.missing]
    folder.write(received + errors)
    folder.finish("timed_out", failure={"rank": late.missing[0], "error": message,
                                        "index": header["index"],
                                        "configuration": header["label"]})
    abort_job(comm, TIMEOUT_EXIT_STATUS)


def _progress(items, name, enabled):
    if not enabled:
        return items
    from tqdm import tqdm
    return tqdm(items, desc=name, unit="config", file=sys.stderr, dynamic_ncols=True)


def configuration_label(recipe: Recipe, configuration: dict) -> str:
    """A short name of ``configuration`` for the progress bar: the values of the
    components the recipe varies, e.g. ``Relu 64x256 | pytorch | threads=2``."""
    runners = ("framework", "executor")

    def label(key):
        value = configuration[key]
        named = getattr(value, "label", None)
        if named is None and isinstance(value, dict):
            named = value.get("label")
        if named is not None:
            return str(named)
        return str(value) if key in runners else f"{key}={value}"

    def order(key):  # what is measured, by what, under which setting
        if key in runners:
            return 2
        if label(key) == f"{key}={configuration[key]}":
            return 3
        return 0 if key in recipe.kind.input_components else 1

    keys = [k for k in configuration if k in recipe.mutable or k in runners]
    return " | ".join(label(k) for k in sorted(keys, key=order))


def _collective(kind) -> bool:
    """Whether the ranks measure a configuration together (Level 3: distributed
    training), so that one rank's error leaves the others waiting for it."""
    return getattr(kind, "collective", kind.level == 3)


def _threads(configuration: dict, size: int) -> int | None:
    threads = configuration.get("threads")
    if threads is None and size > 1:
        threads = max(1, (os.cpu_count() or 1) // size)  # ranks share the cores fairly
    return threads


def _record_header(recipe: Recipe, configuration: dict, index: int, rank: int,
                   size: int) -> dict:
    """What a record says about its configuration, known before it is measured; with
    ``oversubscribed`` where its ranks x threads exceed the CPUs this process may use
    (allowed, and marked so that its times are read as such)."""
    kind = recipe.kind
    threads = _threads(configuration, size)
    header = {"kind": "measurement", "level": kind.level, "experiment": kind.name,
              "index": index, "rank": rank, "size": size,
              "configuration": {**kind.describe(configuration), "threads": threads}}
    usable = _usable_cpus()
    if threads is not None and size * threads > usable:
        header["oversubscribed"] = {"ranks": size, "threads_per_rank": threads,
                                    "usable_cpus": usable}
    return header


@functools.lru_cache(maxsize=1)
def _usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _measure(recipe: Recipe, configuration: dict, index: int, output_dir: str,
             state: dict, rank: int, size: int, remeasure_interfered: int = 0,
             interference_rule=None) -> dict:
    kind = recipe.kind
    threads = _threads(configuration, size)
    if threads is not None:
        set_thread_counts(threads)
    record = _record_header(recipe, configuration, index, rank, size)
    skip = kind.applicable(configuration) if hasattr(kind, "applicable") else None
    if skip:
        record.update(kind="skipped", reason=skip)
        return record
    subject = "-".join(str(v) for k, v in configuration.items()
                       if k in ("framework", "executor", "mode"))
    tag = f"{index:04d}-{subject}" + (f"-rank{rank}" if size > 1 else "")
    try:
        with warnings.catch_warnings():
            # Kept in the result and listed in the report; printing them would break
            # the progress bar.
            warnings.simplefilter("ignore", UnstableMeasurementWarning)
            result, watched = measure_watched(
                lambda: kind.measure(recipe, configuration, tag, output_dir, state),
                threads, remeasure_interfered, interference_rule,
                world_communicator() if size > 1 else None,
                collective=getattr(kind, "collective", False))
        record.update(watched)
    except Exception as exc:
        if _collective(kind) and size > 1 and not isinstance(exc, Deep500Error):
            raise  # the other ranks may wait in a collective for this one: run_recipe
        # One failing configuration is recorded and the others still run. (A
        # collective experiment's Deep500Errors are agreed by all its ranks.)
        record.update(kind="error", error=f"{type(exc).__name__}: {exc}",
                      threads_in_force=thread_conditions())
        return record
    checks = [c for c in (t.check(result.metrics) for t in recipe.acceptance) if c]
    record.update(result=result.to_dict(), acceptance=checks,
                  passed=all(c["passed"] for c in checks))
    return record


def _manifest(recipe: Recipe, argv, size: int, configurations: int,
              allocator: dict | None = None) -> dict:
    """What the run is and where it runs, built in well under a second: the thread
    settings are those of the frameworks imported so far (importing PyTorch and
    TensorFlow to ask them takes seconds); the run adds each framework's as it loads
    (``threads.in_force_after_loading``)."""
    import deep500
    package_dir = os.path.dirname(os.path.abspath(deep500.__file__))
    return {
        "recipe": {"name": recipe.name, "path": recipe.path, "experiment": recipe.experiment,
                   "content": recipe.raw},
        "command_line": list(argv if argv is not None else sys.argv),
        "started": datetime.datetime.now().astimezone().isoformat(),
        "status": "running",
        "configurations": configurations,
        "mpi_ranks": size,
        "versions": sysinfo.software_versions(),
        "hardware": sysinfo.hardware(),
        "threads": {"requested": recipe.fixed.get("threads"),
                    "in_force_at_start": sysinfo.framework_threads(imported_only=True)},
        "seeds": {"seed": recipe.fixed.get("seed", recipe.mutable.get("seed"))},
        "git_revision": {"deep500": sysinfo.git_revision(package_dir),
                         "working_directory": sysinfo.git_revision(os.getcwd())},
        "environment": {k: v for k, v in os.environ.items()
                        if k.endswith("_NUM_THREADS") or k in ("CUDA_VISIBLE_DEVICES",)},
        "timeout_s": recipe.timeout,
        "allocator": allocator,
        "machine": machine_file.manifest_entry(recipe.machine, recipe.machine_path,
                                               recipe.machine_given_by),
    }
