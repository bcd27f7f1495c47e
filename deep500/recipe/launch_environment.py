"""Components of a recipe that set the environment of the ``mpirun`` job a rank grid
launches (:mod:`deep500.recipe.rank_grid`): settings a library reads once, when MPI
starts, so that two values cannot share one MPI world.

Today there is one, ``mpich_allreduce``: the algorithm of MPICH's ``MPI_Allreduce``,
the control variable ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` (MPICH reads it at
``MPI_Init``; the valid values are those of the installed MPICH 5.0's CVAR description,
``mpivars`` lists them: ``deep500.lv3_distributed.collectives.mpich``). ``auto`` is
MPICH's own selection. A part of the grid whose configurations say ``mpich_allreduce:
ring`` runs under ``mpirun`` with the variable (and its two aliases, whichever MPICH
reads first) set to ``ring``; ``auto`` sets ``auto``, so that a value exported in the
shell does not leak into the part that measures MPICH's default.

How it was verified that the variable takes effect (docs/distributed.md, "Default
versus best collective"): on the emulated cluster of 4 nodes the bytes each node's
link carried per 4 MiB allreduce were 2.00 n with ``recursive_doubling`` and
``recexch`` (log2 4 exchanges of n), 1.50 n with ``ring`` and
``reduce_scatter_allgather`` (2 (p-1)/p n) and 2, 2, 1, 1 n with ``tree``, with or
without ``MPIR_CVAR_DEVICE_COLLECTIVES=none``; on shared memory a forced algorithm that
cannot run a 1-element allreduce is reported by MPICH's fallback for the user's call
too. So the ch4 device does not override the choice here and nothing more is set.
"""
from __future__ import annotations

from deep500.lv3_distributed.collectives.mpich import (MPICH_ALLREDUCE_ALGORITHMS,
                                                       MPICH_ALLREDUCE_CVAR,
                                                       mpich_allreduce_algorithm)
from deep500.recipe.problems import describe
from deep500.utils.errors import Deep500Error, RecipeError

MPICH_ALLREDUCE = "mpich_allreduce"
# MPICH reads the first of these it finds; all of them get the part's value.
_MPICH_ALLREDUCE_NAMES = (MPICH_ALLREDUCE_CVAR, "MPICH_ALLREDUCE_INTRA_ALGORITHM",
                          "MPIR_PARAM_ALLREDUCE_INTRA_ALGORITHM")
#: The launch-environment components, in the order a part's settings are listed.
LAUNCH_KEYS = (MPICH_ALLREDUCE,)


def parse_mpich_allreduce(value, where, recipe_dir=None) -> str:
    """``value`` if it is one of MPICH's ``MPI_Allreduce`` algorithms, else a
    RecipeError naming ``where`` and listing the valid values."""
    if not isinstance(value, str) or value not in MPICH_ALLREDUCE_ALGORITHMS:
        raise RecipeError(f"{where}: {describe(value)} is not an algorithm of MPICH's "
                          f"MPI_Allreduce "
                          f"({MPICH_ALLREDUCE_CVAR}); choose one of "
                          f"{', '.join(MPICH_ALLREDUCE_ALGORITHMS)} (auto: MPICH's own "
                          f"choice)")
    return value


def launch_settings(configuration: dict) -> dict:
    """The launch-environment components ``configuration`` sets (those not None)."""
    return {key: configuration[key] for key in LAUNCH_KEYS
            if configuration.get(key) is not None}


def environment(settings: dict) -> dict:
    """The variables a part's ``mpirun`` gets for ``settings``."""
    variables = {}
    algorithm = settings.get(MPICH_ALLREDUCE)
    if algorithm is not None:
        variables.update({name: algorithm for name in _MPICH_ALLREDUCE_NAMES})
    return variables


def in_effect(environ=None) -> dict:
    """What this process runs under, for each launch-environment component."""
    return {MPICH_ALLREDUCE: mpich_allreduce_algorithm(environ)}


def mismatch(settings: dict, environ=None) -> str | None:
    """Why ``settings`` are not in effect in this process (``environ``, default
    ``os.environ``), or None when they are."""
    try:
        current = in_effect(environ)
    except Deep500Error as exc:
        return str(exc)
    wrong = {key: value for key, value in settings.items() if current[key] != value}
    if not wrong:
        return None
    return ", ".join(f"{key}: {value} (this process's MPI started with "
                     f"{MPICH_ALLREDUCE_CVAR}={current[key]})"
                     for key, value in wrong.items())
