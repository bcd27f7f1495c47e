"""``deep500 run --np N RECIPE``: this process holds the run folder and outlives the
``mpirun -np N`` job it starts, so that the run is finished however the job ends.

It takes the folder (its lock, one session, the manifest, ``running``), then starts
``mpirun -np N python -m deep500 run RECIPE --out DIR`` beside the interpreter, every
rank under a watcher (:mod:`deep500.lv3_distributed.rank_watch`). The job is one
*part* of the session that is the whole recipe (:class:`deep500.recipe.rank_grid.Part`
with ``whole``): its rank 0 joins the folder and appends every configuration's records
and the counts, as under a bare ``mpirun``. When ``mpirun`` ends (it ran, the ranks
recorded a failure or a timeout, a rank was killed or crashed without a word, or this
process was interrupted and passed the signal on), this process writes the final
manifest from what it saw, stores the run and writes the report
(:mod:`deep500.recipe.run_endings`), and ``deep500 run`` exits with the job's status.

Under a bare ``mpirun -np N deep500 run`` nothing outlives the ranks: rank 0 finishes
the run as it can (``docs/run_lifecycle.md``).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict

from deep500.recipe.manifest import final_status, run_manifest
from deep500.recipe.rank_grid import PART_VARIABLE, Part
from deep500.recipe.run_endings import finalize, run_job
from deep500.recipe.run_summary import RunSummary, summarize
from deep500.results.run_folder import RunFolder, default_run_path
from deep500.utils.allocator import fix_allocator_thresholds

#: How a rank runs the ``deep500`` command (interpreter arguments before ``run``).
RANK_PROGRAM = ["-m", "deep500"]


def run_on_ranks(recipe, ranks: int, output_dir: str | None, argv, progress: bool,
                 remeasure_interfered: int, append: bool, database: str | None,
                 machine: str | None, write_report: bool = True,
                 mpirun_args: list | None = None) -> RunSummary:
    """Run ``recipe`` on ``ranks`` MPI ranks as the module docstring says; returns the
    RunSummary of the session (``exit_status`` set when the job did not run to its
    end). An interrupt of this process is raised after the run was finished, stored
    and reported."""
    configurations = recipe.configurations()
    output_dir = os.path.abspath(output_dir or default_run_path(recipe.name))
    folder = RunFolder.claim(output_dir, append)
    folder.start(run_manifest(recipe, argv, ranks, configurations,
                              fix_allocator_thresholds()))
    part = Part(output_dir, folder.session, folder.first_index, ranks, whole=True)
    program = [*RANK_PROGRAM, "run", recipe.path, "--out", output_dir,
               f"--remeasure-interfered={remeasure_interfered}",
               *([] if progress else ["--quiet"]),
               *(["--machine", machine] if machine else []),
               *(["--select", recipe.selection] if getattr(recipe, "selection", None)
                 else [])]
    exit_status, final = None, ("complete",)
    try:
        status, ending = run_job(folder, ranks, program, mpirun_args or (),
                                 {PART_VARIABLE: json.dumps(asdict(part))})
        if ending is not None:
            exit_status, final = (status if status not in (0, 1) else 1), ending
    except BaseException as exc:
        final = final_status(exc, None)
        raise
    finally:
        stored, reports = finalize(folder, final, database, write_report)
    if exit_status is not None:
        sys.stderr.write(f"deep500: the run on {ranks} ranks stopped: "
                         f"{folder.manifest.get('status')} "
                         f"({(folder.manifest.get('failure') or {}).get('error')}); "
                         f"results written before it are kept in {output_dir}\n")
    return summarize(output_dir, folder.records, reports, stored, exit_status)
