"""A run's manifest as ``deep500 run`` writes it (``docs/run_lifecycle.md``): what the
run is and where it runs, before anything is measured, and the status it ends with.
Built alike for a run on the ranks ``mpirun`` started (:mod:`deep500.recipe.runner`)
and for a grid of rank counts (:mod:`deep500.recipe.rank_grid`)."""
from __future__ import annotations

import datetime
import os
import sys

from deep500.recipe import machine_file
from deep500.lv3_distributed.cluster.session import current_description
from deep500.recipe.conditions import threads_of_plan
from deep500.recipe.operator_rows import row_selections
from deep500.utils import sysinfo


def run_manifest(recipe, argv, mpi_ranks, configurations: list[dict],
                 allocator: dict | None = None) -> dict:
    """What the run is and where it runs, built in well under a second: the thread
    settings are those of the frameworks imported so far (importing PyTorch and
    TensorFlow to ask them takes seconds); the run adds each framework's as it loads
    (``threads.in_force_after_loading``).

    ``mpi_ranks``: the world's size, or a rank grid's rank counts (a list);
    ``configurations``: those the run measures."""
    import deep500
    package_dir = os.path.dirname(os.path.abspath(deep500.__file__))
    return {
        "recipe": {"name": recipe.name, "path": recipe.path, "experiment": recipe.experiment,
                   "content": recipe.raw},
        "command_line": list(argv if argv is not None else sys.argv),
        "started": datetime.datetime.now().astimezone().isoformat(),
        "status": "running",
        "configurations": len(configurations),
        "mpi_ranks": mpi_ranks,
        "versions": sysinfo.software_versions(),
        "hardware": sysinfo.hardware(),
        "threads": threads_entry(recipe, configurations, mpi_ranks),
        "seeds": {"seed": recipe.fixed.get("seed", recipe.mutable.get("seed"))},
        "git_revision": {"deep500": sysinfo.git_revision(package_dir),
                         "working_directory": sysinfo.git_revision(os.getcwd())},
        "environment": {k: v for k, v in os.environ.items()
                        if k.endswith("_NUM_THREADS") or k in ("CUDA_VISIBLE_DEVICES",)},
        "timeout_s": recipe.timeout,
        "allocator": allocator,
        "machine": machine_file.manifest_entry(recipe.machine, recipe.machine_path,
                                               recipe.machine_given_by),
        "cluster": current_description(),  # None: ranks on this host's shared memory
        "row_selections": row_selections(recipe),  # which DeepBench rows were sampled
    }


def threads_entry(recipe, configurations: list[dict], mpi_ranks) -> dict:
    """The manifest's ``threads``: the count the recipe fixes (``requested``, None
    where it gives none or varies it), the counts it varies (``varied``), the
    distinct counts the configurations run with once resolved (``resolved``,
    :class:`deep500.recipe.conditions.Conditions`) and the frameworks' settings at
    the start."""
    # a rank grid's configurations name their own ranks
    ranks = mpi_ranks if isinstance(mpi_ranks, int) else 1
    entry = {"requested": recipe.fixed.get("threads")}
    if "threads" in recipe.mutable:
        entry["varied"] = list(recipe.mutable["threads"])
    entry["resolved"] = threads_of_plan(configurations, ranks)
    entry["in_force_at_start"] = sysinfo.framework_threads(imported_only=True)
    return entry


def final_status(outcome: BaseException | None, rank: int | None) -> tuple:
    """The manifest's final status, and its ``failure`` entry (or the ``signal`` of an
    interrupt) where it has one, for how the run ended: ``outcome`` is the exception
    that ended it (None: it ran to its end) and ``rank`` the rank it ended on (None:
    the process that launched the ranks)."""
    if outcome is None:
        return ("complete",)
    if isinstance(outcome, KeyboardInterrupt):  # SIGINT, or SIGTERM (Interrupted)
        return ("interrupted", {"signal": signal_name(outcome)})
    return ("failed", {"failure": {"rank": rank,
                                   "error": f"{type(outcome).__name__}: {outcome}"}})


def signal_name(interrupt: KeyboardInterrupt) -> str:
    """The signal behind ``interrupt``: its ``signum``
    (:class:`deep500.utils.interrupts.Interrupted`), else SIGINT (Python's own
    KeyboardInterrupt)."""
    import signal
    return signal.Signals(getattr(interrupt, "signum", signal.SIGINT)).name
