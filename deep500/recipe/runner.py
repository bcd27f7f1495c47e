"""Running a recipe: check it, measure every configuration, write results as they come,
then the report.

Under ``mpirun -np N deep500 run ...`` every rank measures every configuration; rank 0
gathers each measurement from all ranks and writes it.

What reaches disk, whatever happens (``docs/run_lifecycle.md``):

- rank 0 takes the run folder (:class:`deep500.recipe.run_folder.RunFolder`: one run per
  folder) and writes the manifest, ``running``, before any rank measures anything;
- a configuration that raises is an error record and the next one runs; where the
  ranks measure together (a collective experiment) and one rank raises, that rank
  writes its error record and marks the manifest ``failed`` before the job is aborted;
- SIGINT and SIGTERM finish the manifest as ``interrupted`` with the counts of what was
  written (exit status 130 and 143, from ``deep500 run``);
- a recipe's ``timeout`` (seconds per configuration) ends every rank of a configuration
  that runs longer, after an error record with ``timeout: true`` and a ``timed_out``
  manifest (:mod:`deep500.recipe.watchdog`).
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
                                                world_communicator)
from deep500.recipe.remeasure import measure_watched
from deep500.recipe.results import (RunFolderError, configuration_in_progress,
                                    mark_run_failed, record_failure)
from deep500.recipe.run_folder import RunFolder
from deep500.recipe.schema import Recipe, load_recipe
from deep500.recipe.watchdog import TIMEOUT_EXIT_STATUS, Watchdog
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

    @property
    def ok(self) -> bool:
        return self.errors == 0 and self.acceptance_failures == 0


def default_output_dir(recipe: Recipe) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("results", f"{recipe.name}-{stamp}")


def run_recipe(path: str, output_dir: str | None = None, argv: list | None = None,
               progress: bool = True, write_report: bool = True,
               remeasure_interfered: int = 0, interference_rule=None) -> RunSummary:
    """Run the recipe at ``path``; see the module docstring.

    Every configuration is measured under the telemetry sampler; one judged interfered
    (by ``interference_rule``, default :class:`deep500.utils.telemetry.InterferenceRule`)
    is re-measured up to ``remeasure_interfered`` times (see
    :func:`deep500.recipe.remeasure.measure_watched`)."""
    allocator = fix_allocator_thresholds()  # before anything big is allocated
    recipe = load_recipe(path)  # every check happens before any work
    comm = world_communicator()
    rank, size = (comm.Get_rank(), comm.Get_size()) if comm else (0, 1)
    if rank == 0:
        output_dir = output_dir or default_output_dir(recipe)
        os.makedirs(output_dir, exist_ok=True)
    if comm:
        output_dir = comm.bcast(output_dir, root=0)
    configurations = recipe.configurations()
    manifest = _manifest(recipe, argv, size, len(configurations)) if rank == 0 else None
    if manifest is not None:
        manifest["allocator"] = allocator
    writer = ResultsWriter(output_dir) if rank == 0 else None
    if rank == 0:
        write_manifest(output_dir, manifest)

    state = recipe.kind.new_state()
    errors = failures = 0
    started = time.time()
    bar = _progress(configurations, recipe.name, enabled=progress and rank == 0)
    try:
        for index, configuration in enumerate(bar):
            record = _measure(recipe, configuration, index, output_dir, state, rank, size,
                              remeasure_interfered, interference_rule)
            records = comm.gather(record, root=0) if comm else [record]
            if rank == 0:
                for item in records:
                    writer.write(item)
                # per configuration, not per rank: one failed scheme is one failure
                errors += any(item["kind"] == "error" for item in records)
                failures += any(item["kind"] == "measurement" and not item["passed"]
                                for item in records)
    finally:
        if rank == 0:
            writer.close()
            manifest["status"] = "complete" if sys.exc_info()[0] is None else "interrupted"
            manifest["duration_s"] = time.time() - started
            manifest["measurements"] = len(configurations) * size
            write_manifest(output_dir, manifest)
    reports = []
    if rank == 0 and write_report:
        from deep500.report import write_reports
        reports = write_reports(output_dir)
    return RunSummary(output_dir, len(configurations), errors, failures, reports)


def _progress(items, name, enabled):
    if not enabled:
        return items
    from tqdm import tqdm
    return tqdm(items, desc=name, unit="config", file=sys.stderr, dynamic_ncols=True)


def _measure(recipe: Recipe, configuration: dict, index: int, output_dir: str,
             state: dict, rank: int, size: int, remeasure_interfered: int = 0,
             interference_rule=None) -> dict:
    kind = recipe.kind
    threads = configuration.get("threads")
    if threads is None and size > 1:
        threads = max(1, (os.cpu_count() or 1) // size)  # ranks share the cores fairly
    if threads is not None:
        set_thread_counts(threads)
    record = {"kind": "measurement", "level": kind.level, "experiment": kind.name,
              "index": index, "rank": rank, "size": size,
              "configuration": {**kind.describe(configuration), "threads": threads}}
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
    except (Deep500Error, RuntimeError, ValueError, MemoryError) as exc:
        # One failing configuration is recorded and the others still run.
        record.update(kind="error", error=f"{type(exc).__name__}: {exc}",
                      threads_in_force=thread_conditions())
        return record
    checks = [c for c in (t.check(result.metrics) for t in recipe.acceptance) if c]
    record.update(result=result.to_dict(), acceptance=checks,
                  passed=all(c["passed"] for c in checks))
    return record


def _manifest(recipe: Recipe, argv, size: int, configurations: int) -> dict:
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
                    "in_force_at_start": sysinfo.framework_threads()},
        "seeds": {"seed": recipe.fixed.get("seed", recipe.mutable.get("seed"))},
        "git_revision": {"deep500": sysinfo.git_revision(package_dir),
                         "working_directory": sysinfo.git_revision(os.getcwd())},
        "environment": {k: v for k, v in os.environ.items()
                        if k.endswith("_NUM_THREADS") or k in ("CUDA_VISIBLE_DEVICES",)},
    }
