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

import contextlib
import functools
import sys
import time

from deep500.lv3_distributed.mpi_launch import (LateRanks, gather_to_root, in_mpi_world,
                                                world_communicator)
from deep500.recipe import machine_file, rank_grid, selection
from deep500.recipe import epoch_progress
from deep500.recipe.conditions import Conditions
from deep500.recipe.manifest import final_status, run_manifest
from deep500.recipe.measurement import (configuration_label, measure_configuration,
                                        record_header)
from deep500.recipe.run_failures import (late_grace, ranks_timed_out, record_this_failure,
                                         timed_out)
from deep500.recipe.run_summary import RunSummary, counted, summarize
from deep500.recipe.schema import Recipe, load_recipe
from deep500.recipe.watchdog import Watchdog
from deep500.results.files import RunFolderError, configuration_in_progress
from deep500.results.run_folder import RunFolder, default_run_path
from deep500.utils import sysinfo
from deep500.utils.allocator import fix_allocator_thresholds
from deep500.utils.storage_errors import StorageError


def load_run_recipe(path: str, machine: str | None = None,
                    select: str | None = None) -> Recipe:
    """The checked recipe at ``path`` with its machine file: ``machine`` (a path from
    the working directory, or a shipped machine's name; ``deep500 run --machine``)
    replaces the recipe's own ``machine:``; ``select`` (``deep500 run --select``) keeps
    the configurations it selects (:mod:`deep500.recipe.selection`). A recipe problem
    raises RecipeError, a machine file that does not load MachineError (both
    Deep500Errors: exit status 2), before anything runs."""
    recipe = selection.select(load_recipe(path), select)
    if machine is not None:
        recipe.machine, recipe.machine_path = machine_file.load(machine)
        recipe.machine_given_by = "--machine"
    return recipe


def run_recipe(path: str, output_dir: str | None = None, argv: list | None = None,
               progress: bool = True, write_report: bool = True,
               remeasure_interfered: int = 0, interference_rule=None,
               append: bool = False, database: str | None = None,
               machine: str | None = None, mpirun_args: list | None = None,
               ranks: int | None = None, select: str | None = None) -> RunSummary:
    """Run the recipe at ``path``; see the module docstring.

    ``output_dir`` must be new or empty unless ``append`` (a new session in the folder,
    see :mod:`deep500.results.run_folder`); RunFolderError (on every rank) otherwise.

    Every configuration is measured under its conditions
    (:class:`deep500.recipe.conditions.Conditions`: its threads, resolved once and put
    back after it) and the telemetry sampler; one judged interfered (by
    ``interference_rule``, default :class:`deep500.utils.telemetry.InterferenceRule`)
    is re-measured up to ``remeasure_interfered`` times (see
    :func:`deep500.recipe.remeasure.measure_watched`).

    With ``database`` (a path), rank 0 also stores the run in that results database
    when the run ends, however it ends (:mod:`deep500.store`); a failure to store warns
    and leaves the folder as it is.

    ``machine``: a machine file for the experiments (``recipe.machine``), replacing
    the recipe's ``machine:`` (see :func:`load_run_recipe`); the manifest records it.

    ``select``: only the configurations it selects (``deep500 run --select``,
    :mod:`deep500.recipe.selection`); launched ranks are given it too.

    A recipe with ``ranks`` outside ``mpirun`` launches each rank count under
    ``mpirun`` (:func:`deep500.recipe.rank_grid.run_grid`, with ``mpirun_args``, e.g. a
    hostfile's ``-f FILE``); under ``mpirun`` its only rank count must be the world's
    size (:func:`deep500.recipe.rank_grid.check_launch`).

    ``ranks`` (``deep500 run --np N``, outside ``mpirun``): this process launches the
    run on that many ranks under ``mpirun`` and finishes it however the job ends
    (:func:`deep500.recipe.launcher.run_on_ranks`)."""
    allocator = fix_allocator_thresholds()  # before anything big is allocated
    recipe = load_run_recipe(path, machine, select)  # every check before any work
    comm = world_communicator()
    part = rank_grid.current_part()
    if ranks is not None and part is None and not in_mpi_world():
        rank_grid.check_launch(recipe, ranks)  # a grid or other ranks: refused here
        from deep500.recipe.launcher import run_on_ranks
        return run_on_ranks(recipe, ranks, output_dir, argv, progress,
                            remeasure_interfered, append, database, machine, write_report,
                            mpirun_args)
    if recipe.rank_counts() is not None and part is None and not in_mpi_world():
        return rank_grid.run_grid(recipe, output_dir, argv, progress, remeasure_interfered,
                                  append, database, machine, write_report, mpirun_args)
    rank_grid.check_launch(recipe, comm.Get_size() if comm else 1)
    run = _RankRun(recipe, comm, part, remeasure_interfered, interference_rule)
    run.open(output_dir, append, argv, allocator)
    run.measure_all(progress, database, write_report)
    return run.summary(write_report)


class _RankRun:
    """This rank's share of a run: the configurations it measures, where their records
    go, and the counts of what rank 0 wrote."""

    def __init__(self, recipe: Recipe, comm, part, remeasure_interfered: int,
                 interference_rule):
        self.recipe, self.comm, self.part = recipe, comm, part
        self.rank, self.size = (comm.Get_rank(), comm.Get_size()) if comm else (0, 1)
        self.remeasure_interfered = remeasure_interfered
        self.interference_rule = interference_rule
        # (position in the recipe's plan, configuration): a part of a rank grid runs its
        # configurations (its rank count and launch settings) under their indices in
        # the whole plan
        self.configurations = [(p, c) for p, c in enumerate(recipe.configurations())
                               if part is None or rank_grid.in_part(part, c)]
        self.state = recipe.kind.new_state()
        self.folder: RunFolder | None = None   # rank 0's
        self.output_dir = self.session = self.first_index = self.records_comm = None
        self.errors = self.failures = self.done = 0
        self.written: list[dict] = []  # counted parts of each record on disk (rank 0)
        self.loaded = sysinfo.loaded_frameworks()
        self.stored = None

    def open(self, output_dir: str | None, append: bool, argv, allocator) -> None:
        """Rank 0 takes the run folder (or joins its session, in a part of a rank grid)
        and writes the manifest before any rank measures; every rank learns the folder,
        the session and its first index, or raises the folder's problem alike."""
        folder = problem = None
        if self.rank == 0:
            part = self.part
            output_dir = part.output_dir if part else (
                output_dir or default_run_path(self.recipe.name))
            try:
                folder = (RunFolder.join(output_dir, part.session, part.first_index) if part
                          else RunFolder.claim(output_dir, append))
            except RunFolderError as exc:
                if self.comm is None:
                    raise
                problem = exc
            if folder is not None and part is None:
                # Before any rank starts (they wait in the bcast below): whichever rank
                # fails first, the manifest is on disk.
                folder.start(run_manifest(self.recipe, argv, self.size,
                                          [c for _, c in self.configurations], allocator))
        if self.comm:
            shared = (output_dir, folder and folder.session, folder and folder.first_index,
                      problem and str(problem))
            output_dir, session, first_index, message = self.comm.bcast(shared, root=0)
            if message:  # every rank stops alike, with nothing run
                raise problem if problem is not None else RunFolderError(message)
            records_comm = self.comm.Dup()  # the records' messages meet no other receive
        else:
            session, first_index, records_comm = folder.session, folder.first_index, None
        self.folder, self.output_dir, self.session = folder, output_dir, session
        self.first_index, self.records_comm = first_index, records_comm

    def measure_all(self, progress: bool, database: str | None,
                    write_report: bool = True) -> None:
        """Measure every configuration in turn; rank 0 writes each one's records as they
        come and finishes the manifest however the loop ends."""
        recipe = self.recipe
        # A single process that times out ends in the watchdog's thread: it finishes
        # the run there (nothing outlives it to do so).
        on_end = (functools.partial(self._end_after_timeout, database, write_report)
                  if self.comm is None and self.part is None else None)
        watchdog = (Watchdog(recipe.timeout, functools.partial(
            timed_out, self.output_dir, self.rank, self.comm, recipe.timeout,
            on_end=on_end)) if recipe.timeout else None)
        bar = _progress(self.configurations,
                        recipe.name + (f" ({self.size} ranks)" if self.part else ""),
                        enabled=progress and self.rank == 0)
        outcome = None
        try:
            with epoch_progress.shown(progress and self.rank == 0):
                for position, configuration in bar:
                    records = self._measure(position, configuration, bar, watchdog)
                    self.done += 1
                    if self.rank == 0:
                        self._write(records)
        except BaseException as exc:
            outcome = exc
            if self.rank != 0:  # says why it stops before the job is aborted; rank 0 below
                record_this_failure(self.output_dir, self.rank, self.comm)
            raise
        finally:
            if watchdog is not None:
                watchdog.close()
            if self.rank == 0:
                self._finish(outcome, database)
        if self.records_comm is not None:
            self.records_comm.Free()

    def _measure(self, position: int, configuration: dict, bar, watchdog) -> list[dict]:
        """One configuration measured on this rank under its conditions; on rank 0,
        every rank's records of it."""
        recipe = self.recipe
        label = configuration_label(recipe, configuration)
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(label)  # drawn now: shown while it runs
        conditions = Conditions.of(configuration, self.size)
        with conditions.applied() as threads:
            header = {**record_header(recipe, configuration, conditions,
                                      self.first_index + position, self.rank, self.size),
                      "label": label, "session": self.session, "threads": threads}
            started = time.monotonic()
            with configuration_in_progress(self.output_dir, header):
                try:
                    with watchdog.watch(header) if watchdog else contextlib.nullcontext():
                        record = measure_configuration(
                            recipe, {**configuration, "threads": conditions.threads},
                            header, self.output_dir, self.state, self.remeasure_interfered,
                            self.interference_rule)
                except Exception:
                    # An error measure_configuration does not record (one rank of a
                    # collective measurement, which the others wait for): its error
                    # record, while the configuration is known; then guarded_main
                    # aborts the job.
                    record_this_failure(self.output_dir, self.rank, self.comm)
                    raise
        return self._gathered(record, header, started)

    def _gathered(self, record: dict, header: dict, started: float) -> list[dict]:
        """Every rank's record of the configuration, on rank 0 (this rank's alone
        without MPI); ranks later than the recipe's timeout are recorded as timed out
        and end the job."""
        if not self.comm:
            return [record]
        timeout = self.recipe.timeout
        deadline = started + timeout + late_grace(timeout) if timeout else None
        try:
            return gather_to_root(self.records_comm, record, deadline)
        except LateRanks as late:  # rank 0 only
            ranks_timed_out(self.folder, late, header, timeout, self.comm)
            return [record]

    def _write(self, records: list[dict]) -> None:
        """Rank 0: the configuration's records on disk, counted, with the thread
        settings of a framework the measurement loaded."""
        folder = self.folder
        if sysinfo.loaded_frameworks() != self.loaded:  # cheap only when read here
            self.loaded = sysinfo.loaded_frameworks()
            folder.manifest["threads"]["in_force_after_loading"] = \
                sysinfo.framework_threads(imported_only=True)
        folder.write(records)
        self.written += [counted(item) for item in records]
        # per configuration, not per rank: one failed scheme is one failure
        self.errors += any(item["kind"] == "error" for item in records)
        self.failures += any(item["kind"] == "measurement" and not item["passed"]
                             for item in records)

    def _finish(self, outcome: BaseException | None, database: str | None) -> None:
        """Rank 0: the final manifest for how the loop ended, and the run stored. A
        manifest the disk cannot take after the run already failed is said in a line;
        the failure that ended the run is the one raised."""
        status, *fields = final_status(outcome, self.rank)
        try:
            self.folder.finish(status, **(fields[0] if fields else {}))
        except StorageError as problem:
            if outcome is None:
                raise
            sys.stderr.write(f"deep500: the final manifest could not be written: "
                             f"{problem}\n")
        if database is not None and self.part is None:
            from deep500.store import store_run_or_warn
            self.stored = store_run_or_warn(self.output_dir, database)

    def _end_after_timeout(self, database: str | None, write_report: bool) -> None:
        """A single process, from the watchdog's thread while the main thread is stuck
        in the configuration: the final manifest (``timed_out``, as recorded), the run
        stored and the report, before the process ends."""
        from deep500.recipe.run_endings import finalize
        finalize(self.folder, ("timed_out",), database, write_report)

    def summary(self, write_report: bool) -> RunSummary:
        """The report (rank 0, a whole run) and the run's summary."""
        reports = []
        if self.rank == 0 and write_report and self.part is None:
            from deep500.report import write_reports
            reports = write_reports(self.output_dir)
        if self.rank != 0:
            return RunSummary(self.output_dir, self.done, self.errors, self.failures,
                              reports, self.stored)
        return summarize(self.output_dir, self.written, reports, self.stored)


def _progress(items, name, enabled):
    if not enabled:
        return items
    from tqdm import tqdm
    return tqdm(items, desc=name, unit="config", file=sys.stderr, dynamic_ncols=True)
