"""Weak and strong scaling of a distributed recipe (``scaling``, ``global_batch``).

* ``scaling: weak`` (or no ``scaling``, as before it existed): every rank takes
  ``batch_size`` samples per step, so the global batch grows with the ranks and an
  epoch over the same training set takes fewer steps. Weak scaling efficiency is
  T_step(1) / T_step(p) (Gustafson's law: the work per rank is held fixed).
* ``scaling: strong``: the global batch ``global_batch`` is held fixed and each rank
  takes ``global_batch / ranks`` samples (it must divide evenly); the step does the
  same work on more ranks, speedup T(1) / T(p) and efficiency speedup / p (Amdahl's
  law).

These are the two curves of the Deep500 paper (Ben-Nun et al., IPDPS 2019, Fig. 12)
and of PyDTNN (Barrachina et al., J. Supercomputing 2021, Fig. 3), and those
``deep500.recipe.scaling_curves`` predicts.

``lr_scaling: linear`` multiplies the learning rate by global batch / ``batch_size``
(Goyal et al. 2017, sec. 2.1: the recipe's rate is the one for ``batch_size``
samples): by the ranks in weak scaling, by ``global_batch / batch_size`` at every rank
count in strong scaling, whose global batch does not change.
"""
from __future__ import annotations

from deep500.recipe.problems import describe
from deep500.utils.errors import RecipeError

SCALINGS = ("weak", "strong")


def parse_scaling(value, where, recipe_dir=None) -> str:
    if value not in SCALINGS:
        raise RecipeError(f"{where}: {describe(value)} is not a scaling; give weak "
                          f"(batch_size per rank) or strong (global_batch over the ranks)")
    return value


def parse_global_batch(value, where, recipe_dir=None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RecipeError(f"{where}: expected the global batch, a positive integer, got "
                          f"{describe(value)}")
    return value


def batch_per_rank(configuration: dict, ranks: int) -> int:
    """The samples each of ``ranks`` ranks takes per step."""
    if configuration.get("scaling") == "strong":
        global_batch = configuration["global_batch"]
        if global_batch % ranks:
            raise RecipeError(f"global_batch: {global_batch} samples do not split evenly "
                              f"over {ranks} ranks; give a multiple of every rank count")
        return global_batch // ranks
    return configuration["batch_size"]


def learning_rate_factor(configuration: dict, ranks: int) -> float:
    """Global batch / ``batch_size``: what ``lr_scaling: linear`` multiplies by."""
    return batch_per_rank(configuration, ranks) * ranks / configuration["batch_size"]


def batch_details(configuration: dict, ranks: int) -> dict:
    """What a record says of its batch: the scaling, per rank and global."""
    per_rank = batch_per_rank(configuration, ranks)
    return {"scaling": configuration.get("scaling") or "weak", "per_rank": per_rank,
            "global": per_rank * ranks}


def check(recipe, problems) -> None:
    """``scaling: strong`` needs a ``global_batch`` that every rank count divides;
    ``global_batch`` without strong scaling is a mistake."""
    strong = [path for path, value in recipe.located("scaling") if value == "strong"]
    batches = [(path, value) for path, value in recipe.located("global_batch")
               if value is not None]
    if not strong:
        for path, _ in batches:
            problems.add(path, "global_batch is the fixed global batch of scaling: "
                               "strong; add scaling: strong (or [weak, strong]) or "
                               "remove it")
        return
    if not batches:
        problems.add(strong[0], "scaling: strong holds the global batch fixed: give "
                                "global_batch (e.g. fixed: {global_batch: 128})")
        return
    counts = recipe.rank_counts()
    if counts is None:
        problems.add(strong[0], "scaling: strong splits global_batch over the ranks: "
                                "give ranks (e.g. mutable: {ranks: [1, 2, 4]})")
        return
    for path, value in batches:
        uneven = [r for r in counts if value % r]
        if uneven:
            problems.add(path, f"{value} samples do not split evenly over {uneven} "
                               f"rank(s) ({recipe.ranks_key()}); give a multiple of "
                               f"every rank count")
