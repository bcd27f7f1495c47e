"""A grid of rank counts and launch environments: a recipe that names its numbers of
MPI ranks (``ranks``, fixed or ``mutable: {ranks: [1, 2, 4]}``, usually with
``threads`` per rank), and possibly settings read once when MPI starts
(``mpich_allreduce``, :mod:`deep500.recipe.launch_environment`), is run by ``deep500
run recipe.yaml`` outside ``mpirun``, which launches every part itself.

A *part* is keyed by (ranks, launch settings): the configurations with the same rank
count and the same launch-environment components share one ``mpirun`` job, whose
environment carries those settings (``mpich_allreduce: ring`` sets
``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring``). Configurations that differ only in
such a setting cannot share an MPI world: MPICH reads it at ``MPI_Init``.

How it runs (:func:`run_grid`): this process takes the run folder (its lock, one
session, the manifest, ``running``), then, for each distinct part in the order the
configurations first use it, starts ``mpirun -np R python -m deep500 run RECIPE --out
DIR`` beside the interpreter (one rank is ``mpirun -np 1``) with the part's
environment, and waits for it. That job is a *part* of the session (:class:`Part`,
handed down in the ``DEEP500_RANK_GRID_PART`` environment variable): it does not take
the folder, it runs only its configurations (:func:`in_part`), under their indices in
the whole plan, and its rank 0 appends their records to the same ``results.jsonl`` and
the session's counts to the manifest
(:meth:`deep500.results.run_folder.RunFolder.join`). When every part has run, this
process finishes the manifest and writes the one report. The manifest lists each part
under ``rank_grid.parts`` (rank count, launch settings and environment, indices,
command, exit status, seconds, and the part's own emulated cluster, if any).

On an emulated cluster (``--cluster`` or the recipe's ``cluster:``), a grid of one rank
count runs every part in the one cluster; a grid of several rank counts starts a
cluster per part with as many nodes as ranks (:mod:`deep500.recipe.part_cluster`).
With a machine file (the recipe's ``machine:`` or ``--machine``), the grid predicts
every configuration's training step after its parts ran
(:mod:`deep500.recipe.grid_predictions`), into ``rank_grid.predicted``.

A part that fails as a whole run fails (a rank dying in training, a timeout: the
part's ranks record it in the manifest before ``mpirun`` ends them; a rank killed or
crashing without a word, named by its watcher: :mod:`deep500.recipe.run_endings`)
stops the grid:
no later part is started, the manifest keeps the part's failure, the report is
written, and ``deep500 run`` exits with the part's status (124 for a timeout). A
configuration that fails on its own is an error record and the grid goes on, as in any
run. SIGINT and SIGTERM are passed to the running ``mpirun`` (which passes them on to
the ranks) and the session ends ``interrupted``; it is stored and reported however
it ends.

Under an outer ``mpirun`` (or ``deep500 run --np N``) the grid is not launched: a
recipe whose only rank count is the world's size, and whose launch settings are those
the world started with, runs as usual; anything else is a Deep500Error naming the key
(:func:`check_launch`).
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field

from deep500.lv3_distributed.mpi_launch import mpirun_command
from deep500.recipe import launch_environment, part_cluster, run_endings
from deep500.recipe.manifest import final_status, run_manifest
from deep500.recipe.run_summary import RunSummary, summarize
from deep500.results.run_folder import RunFolder, default_run_path
from deep500.utils.allocator import fix_allocator_thresholds
from deep500.utils.errors import Deep500Error

PART_VARIABLE = "DEEP500_RANK_GRID_PART"



@dataclass(frozen=True)
class Part:
    """One job of a grid: where it writes (``output_dir``, ``session``,
    ``first_index`` of the session), on how many ranks it runs, and the launch
    settings its configurations share (``{"mpich_allreduce": "ring"}``)."""
    output_dir: str
    session: int
    first_index: int
    ranks: int
    settings: dict = field(default_factory=dict)
    whole: bool = False  # every configuration: deep500 run --np N (recipe.launcher)


def current_part() -> Part | None:
    """The part this process runs (set by :func:`run_grid` for the ranks it launches),
    or None."""
    text = os.environ.get(PART_VARIABLE)
    if not text:
        return None
    try:
        return Part(**json.loads(text))
    except (ValueError, TypeError) as exc:
        raise Deep500Error(f"{PART_VARIABLE}={text!r} is not a rank-grid part ({exc}); "
                           f"it is set by 'deep500 run' for the jobs it launches: unset "
                           f"it") from None


def part_key(configuration: dict) -> tuple:
    """What tells the parts apart: (ranks, launch settings as sorted pairs)."""
    settings = launch_environment.launch_settings(configuration)
    return configuration.get("ranks"), tuple(sorted(settings.items()))


def recipe_parts(recipe) -> list[tuple[int, dict]]:
    """``(ranks, launch settings)`` of each part of the recipe's grid, in the order the
    configurations first use them."""
    keys = dict.fromkeys(part_key(c) for c in recipe.configurations())
    return [(ranks, dict(settings)) for ranks, settings in keys]


def in_part(part: Part, configuration: dict) -> bool:
    """Whether ``configuration`` is one of ``part``'s."""
    return part.whole or part_key(configuration) == (part.ranks,
                                                     tuple(sorted(part.settings.items())))


def check_launch(recipe, size: int) -> None:
    """Raise Deep500Error when the recipe does not fit this process's MPI world of
    ``size`` ranks: in a part, its rank count must be ``size`` and its launch settings
    those in effect; under an outer ``mpirun`` (or ``--np``), the recipe may name only
    ``size`` ranks and only the launch settings the world started with (it then runs
    as usual). Every rank raises alike (they read the same recipe)."""
    counts = recipe.rank_counts()
    part = current_part()
    if part is not None:
        if part.ranks != size:
            raise Deep500Error(f"{recipe.ranks_key()}: this part of the rank grid is for "
                               f"{part.ranks} rank(s), but mpirun started {size}")
        wrong = launch_environment.mismatch(part.settings)
        if wrong:
            raise Deep500Error(f"this part of the rank grid is for {wrong}; its mpirun "
                               f"was started by 'deep500 run' with that setting, so "
                               f"something in between changed the environment")
        return
    if counts is not None and counts != [size]:
        raise Deep500Error(
            f"{recipe.ranks_key()}: the recipe runs on {counts} rank(s), and 'deep500 "
            f"run' launches each count under mpirun itself, but this process is one of "
            f"{size} rank(s) already started by mpirun (or --np): run 'deep500 run "
            f"{os.path.relpath(recipe.path)}' without mpirun and without --np, or remove "
            f"'ranks' from the recipe to run it on the ranks mpirun starts")
    for _, settings in recipe_parts(recipe):
        wrong = launch_environment.mismatch(settings)
        if wrong:
            raise Deep500Error(
                f"the recipe sets {wrong}; MPI reads it when it starts, so 'deep500 run' "
                f"sets it in the environment of each mpirun job it launches: run "
                f"'deep500 run {os.path.relpath(recipe.path)}' without mpirun and "
                f"without --np")


def run_grid(recipe, output_dir: str | None, argv, progress: bool,
             remeasure_interfered: int, append: bool, database: str | None,
             machine: str | None, write_report: bool = True,
             mpirun_args: list | None = None) -> RunSummary:
    """Run ``recipe`` (with ``ranks``) as the module docstring says; returns the
    RunSummary of the whole session (``exit_status`` set when a part failed)."""
    configurations = recipe.configurations()
    output_dir = os.path.abspath(output_dir or default_run_path(recipe.name))
    folder = RunFolder.claim(output_dir, append)
    folder.start(_grid_manifest(recipe, argv, configurations))
    program = ["-m", "deep500", "run", recipe.path, "--out", output_dir,
               f"--remeasure-interfered={remeasure_interfered}",
               *([] if progress else ["--quiet"]),
               *(["--machine", machine] if machine else []),
               *(["--select", recipe.selection] if getattr(recipe, "selection", None)
                 else [])]
    outcome, exit_status, final = None, None, ("complete",)
    try:
        for ranks, settings in recipe_parts(recipe):
            stopped = _run_part(folder, recipe, configurations, ranks, settings, program,
                                progress, mpirun_args or ())
            if stopped is not None:
                exit_status, final = stopped
                break
            folder.write([])  # the parts so far, on disk
        if exit_status is None and recipe.machine is not None:
            folder.manifest["rank_grid"]["predicted"] = _predictions(
                recipe, configurations, folder.first_index, progress)
    except BaseException as exc:
        outcome = exc
        raise
    finally:
        if outcome is not None:
            final = final_status(outcome, None)
        # however it ended: the manifest, the run stored, the report
        stored, reports = run_endings.finalize(folder, final, database, write_report)
    if exit_status is not None:
        sys.stderr.write(f"deep500: the rank grid stopped: {folder.manifest.get('status')}"
                         f" ({(folder.manifest.get('failure') or {}).get('error')}); "
                         f"results written before it are kept in {output_dir}\n")
    return summarize(output_dir, folder.records, reports, stored, exit_status)


def _predictions(recipe, configurations, first_index: int, progress: bool) -> dict:
    """:func:`deep500.recipe.grid_predictions.predict_grid`, or ``{"error": why}``: the
    measurements stand without their predictions."""
    from deep500.recipe.grid_predictions import predict_grid
    try:
        return predict_grid(recipe, configurations, first_index, progress)
    except (Deep500Error, ValueError, ArithmeticError) as exc:
        sys.stderr.write(f"deep500: {recipe.name}: the predicted steps could not be made "
                         f"({type(exc).__name__}: {exc}); the measurements are kept\n")
        return {"error": f"{type(exc).__name__}: {exc}"}


def _grid_manifest(recipe, argv, configurations: list[dict]) -> dict:
    """The session's manifest: the run's (:func:`deep500.recipe.manifest.run_manifest`)
    with ``rank_grid``, where each part is listed as it ends."""
    counts = recipe.rank_counts()
    manifest = run_manifest(recipe, argv, counts, configurations,
                            fix_allocator_thresholds())
    manifest["rank_grid"] = {"ranks": counts, "parts": [],
                             "launch_keys": [k for k in launch_environment.LAUNCH_KEYS
                                             if k in recipe.kind.components],
                             "launcher": "mpirun beside the interpreter, one job per "
                                         "rank count and launch environment"}
    spec = part_cluster.per_part_spec()
    if spec is not None:
        manifest["cluster"] = part_cluster.grid_description(spec, counts)
    return manifest


def _part_text(ranks: int, settings: dict) -> str:
    return f"{ranks} rank(s)" + "".join(f", {k} {v}" for k, v in settings.items())


def _run_part(folder: RunFolder, recipe, configurations: list[dict], ranks: int,
              settings: dict, program: list, progress: bool, mpirun_args) -> tuple | None:
    """Launch the part (``ranks``, ``settings``) under ``mpirun -np ranks`` with its
    environment (in a cluster of its own where :mod:`part_cluster` says so), wait for
    it and list it in the manifest. Returns None when it ran to its end, else the exit
    status of ``deep500 run`` and the session's final status (a failure its ranks
    recorded, or one of ``mpirun`` itself)."""
    part = Part(folder.path, folder.session, folder.first_index, ranks, settings)
    indices = [folder.first_index + position
               for position, c in enumerate(configurations) if in_part(part, c)]
    command = mpirun_command(ranks, program, mpirun_args)
    variables = launch_environment.environment(settings)
    if progress:
        sys.stderr.write(f"deep500: {recipe.name}: {_part_text(ranks, settings)}, "
                         f"{len(indices)} configuration(s): mpirun -np {ranks}"
                         + "".join(f" {k}={v}" for k, v in variables.items()
                                   if k == launch_environment.MPICH_ALLREDUCE_CVAR)
                         + "\n")
    started = time.monotonic()
    cluster = None
    with part_cluster.part_cluster(ranks) as built:
        if built is not None:
            cluster = built.description()
        status, ending = run_endings.run_job(folder, ranks, program, mpirun_args,
                                             {PART_VARIABLE: json.dumps(asdict(part)),
                                              **variables})
    entry = {"ranks": ranks, "settings": settings, "environment": variables,
             "indices": indices, "command": command, "exit_status": status,
             "seconds": round(time.monotonic() - started, 3)}
    if cluster is not None:
        entry["cluster"] = cluster
        shared = folder.manifest.get("cluster")
        if isinstance(shared, dict) and shared.get("per_part"):
            shared["namespaces"] = list(dict.fromkeys(shared.get("namespaces", []) +
                                                      cluster["namespaces"]))
    folder.manifest["rank_grid"]["parts"].append(entry)
    if ending is None:
        return None
    if len(ending) > 1:  # the launcher saw why (run_endings.job_ending)
        ending[1]["failure"].update(ranks=ranks, settings=settings, indices=indices,
                                    command=command)
    return (status if status not in run_endings.JOB_RAN else 1), ending
