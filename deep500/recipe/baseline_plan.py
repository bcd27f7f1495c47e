"""``deep500 run RECIPE --baseline RUN``: which of the recipe's configurations the
baseline holds, known before anything is measured.

A configuration of this run will be compared with one of the baseline when their
configuration keys are equal (:func:`deep500.store.database.configuration_key`, as
:mod:`deep500.store.compare` matches them). The key of a record is the experiment's
description of the configuration with its resolved thread count
(:func:`deep500.recipe.measurement.record_header`), and both are known from the recipe
alone: a baseline that holds none of them stops the run at once (exit status 2), and
one that holds some says how many will be judged.
"""
from __future__ import annotations

from deep500.recipe.conditions import Conditions
from deep500.recipe.measurement import configuration_label
from deep500.store.database import StoreError, configuration_key

# Configuration labels listed in the message of a baseline with nothing in common.
_LISTED = 6


def planned_keys(recipe, ranks: int = 1) -> dict[str, str]:
    """``{configuration key: label}`` of the records this recipe's run on ``ranks`` ranks
    will write (a rank grid's configurations on their own rank counts)."""
    planned = {}
    for configuration in recipe.configurations():
        threads = Conditions.of(configuration, ranks).threads
        described = {**recipe.kind.describe(configuration), "threads": threads}
        planned[configuration_key(described)] = configuration_label(recipe, configuration)
    return planned


def check_baseline(recipe, baseline, ranks: int = 1) -> str:
    """The line saying how many of the recipe's configurations ``baseline`` (a
    :class:`deep500.store.compare.Run`) holds; StoreError (exit status 2) when it holds
    none, naming what each side has and what to do."""
    planned = planned_keys(recipe, ranks)
    held = {key for key, _ in baseline.measurements}
    common = [key for key in planned if key in held]
    name = baseline.describe()["recipe"]
    if not common:
        mine = list(planned.values())
        theirs = sorted({m["label"] for m in baseline.measurements.values()})
        raise StoreError(
            f"--baseline {baseline.name} (recipe {name!r}) holds none of the "
            f"{len(planned)} configurations of recipe {recipe.name!r}, so nothing would "
            f"be judged; nothing was run. This recipe measures: {_listed(mine)}. The "
            f"baseline holds: {_listed(theirs) if theirs else 'no measured configuration'}"
            f". Give a run of this recipe with the same settings (threads included) as "
            f"the baseline ('deep500 runs' lists each run's recipe)")
    missing = [label for key, label in planned.items() if key not in held]
    return (f"Baseline {baseline.name} (recipe {name!r}): {len(common)} of the "
            f"{len(planned)} configurations will be compared with it"
            + (f"; {len(missing)} not in the baseline: {_listed(missing)}" if missing
               else ""))


def _listed(labels: list) -> str:
    return "; ".join(labels[:_LISTED]) + (f"; ... ({len(labels)} in all)"
                                         if len(labels) > _LISTED else "")
