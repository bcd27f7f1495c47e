"""The console notice that a distributed recipe is about to run on one rank.

``deep500 run recipes/distributed.yaml`` without ``--np``, outside ``mpirun`` and with no
``ranks`` in the recipe trains every scheme on a single rank: valid (the schemes work on
one rank) but rarely what was meant, and it used to pass without a word (issue 31,
item 7). Rank 0 says so before anything runs, and how to run more ranks.
"""
from __future__ import annotations

import os
import sys


def single_rank_notice(recipe) -> str | None:
    """The notice for ``recipe`` run outside ``mpirun`` without ``--np``, or None when
    the recipe names its rank counts (``ranks``) or its experiment has none to name."""
    if "ranks" not in recipe.kind.components or recipe.rank_counts() is not None:
        return None
    path = os.path.relpath(recipe.path)
    return (f"deep500: {path} is a distributed recipe; it runs on 1 rank (no --np given, "
            f"not under mpirun, no 'ranks' in the recipe). To run it on N ranks: "
            f"'deep500 run --np N {path}' (or 'mpirun -np N deep500 run {path}'), or give "
            f"'ranks: N' (or a list) under its fixed or mutable section.")


def say_single_rank(recipe) -> None:
    """Print :func:`single_rank_notice` to stderr, if there is one."""
    notice = single_rank_notice(recipe)
    if notice:
        print(notice, file=sys.stderr, flush=True)
