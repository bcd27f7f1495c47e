"""What an experiment kind contributes to recipes: its components, checks, and how one
configuration is measured. The runner does the rest (threads, MPI, records, acceptance).
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Callable

from deep500.recipe.problems import describe, show
from deep500.utils.errors import RecipeError

REQUIRED = object()


MAX_COUNT = 2 ** 31 - 1   # counts (threads, batch sizes, epochs) frameworks take as C ints
MAX_SEED = 2 ** 63 - 1    # seeds frameworks take as 64-bit integers


def positive_int(value, where, recipe_dir=None):
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_COUNT:
        raise RecipeError(f"{where}: expected a positive integer (at most {MAX_COUNT}), "
                          f"got {describe(value)}")
    return value


def non_negative_int(value, where, recipe_dir=None):
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEED:
        raise RecipeError(f"{where}: expected a non-negative integer (at most 2**63 - 1), "
                          f"got {describe(value)}")
    return value


def dtype(value, where, recipe_dir=None):
    if value not in ("float32", "float64"):
        raise RecipeError(f"{where}: dtype must be float32 or float64, got {describe(value)}")
    return value


def device(value, where, recipe_dir=None):
    from deep500.utils.device import parse_device
    from deep500.utils.errors import Deep500Error
    try:
        parse_device(value)
    except Deep500Error as exc:
        raise RecipeError(f"{where}: {exc}") from None
    return str(value)


# Conditions a configuration is measured under (threads resolved and applied by
# deep500.recipe.conditions), components of every experiment measured on one device.
CONDITIONS = {"threads": (positive_int, None), "device": (device, "cpu"),
              "seed": (non_negative_int, 0)}


def loss_component(*more: str) -> tuple:
    """The ``loss`` component: softmax cross-entropy (the default), cross-entropy, and
    ``more`` losses the experiment also builds."""
    return (one_of(("softmax_cross_entropy", "cross_entropy", *more)),
            "softmax_cross_entropy")


class Spec(dict):
    """A recipe value given as a mapping (an optimizer, a distributed scheme): its
    ``OWN`` keys name it, its other entries are its settings; hashable, so that the
    recipe's cross product and caches can hold it."""
    OWN: tuple = ()

    def settings(self) -> dict:
        return {k: v for k, v in self.items() if k not in self.OWN}

    def settings_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.settings().items())

    def __hash__(self):
        return hash(tuple(sorted((k, repr(v)) for k, v in self.items())))


def named_mapping(entry, key: str, where: str, expected: str) -> dict:
    """``entry`` as a mapping whose ``key`` names it (a string alone is ``{key:
    entry}``); a RecipeError ``"{where}: {expected}, got <what it is>"`` where it is not
    one, and one where a key is not a name."""
    if isinstance(entry, str):
        entry = {key: entry}
    if not isinstance(entry, dict) or not isinstance(entry.get(key), str):
        raise RecipeError(f"{where}: {expected}, got {describe(entry)}")
    keys = [k for k in entry if not isinstance(k, str)]
    if keys:
        raise RecipeError(f"{where}: keys are names (strings), got {show(keys)}")
    return entry


def check_like_default(default, value, where: str) -> None:
    """A hyper-parameter takes the type of its default: a finite number where the
    default is a number, a boolean for a boolean, a string for a string (no default,
    or None: not checked)."""
    if default is inspect.Parameter.empty or default is None:
        return
    if isinstance(default, bool):
        ok, expected = isinstance(value, bool), "a boolean"
    elif isinstance(default, (int, float)):
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value))
        expected = "a finite number"
    elif isinstance(default, str):
        ok, expected = isinstance(value, str), "a string"
    else:
        return
    if not ok:
        raise RecipeError(f"{where}: expected {expected} (its default is {default!r}), "
                          f"got {describe(value)}")


def one_of(choices):
    def validate(value, where, recipe_dir=None):
        if not isinstance(value, str) or value not in choices:
            raise RecipeError(f"{where}: {show(value)} is not one of {list(choices)}")
        return value
    return validate


def name_in(table, what: str, where: str, value, hint: str = "") -> str:
    """``value`` if it is a string naming an entry of ``table``, else a RecipeError
    saying what was expected (never a TypeError for a list or a mapping)."""
    if not isinstance(value, str):
        article = "an" if what[:1] in "aeiou" else "a"
        raise RecipeError(f"{where}: expected {article} {what} name (a string){hint}, got "
                          f"{describe(value)}")
    if value not in table:
        raise RecipeError(f"{where}: unknown {what} {value!r}; known: {sorted(table)}{hint}")
    return value


class Experiment:
    """Base class. Subclasses fill in the class attributes and ``check``/``measure``."""
    name = ""
    level = 0
    # component -> (validator(value, where, recipe_dir), default or REQUIRED)
    components: dict[str, tuple[Callable, Any]] = {}
    # components that define the inputs: varied slowest so cached inputs are reused
    input_components: tuple = ()
    metric_names: tuple = ()
    # what a recipe without ``metrics`` measures
    default_metrics: tuple = ("WallclockTime",)

    def check(self, recipe, problems) -> None:
        """Checks across components (frameworks installed, operators supported, ...),
        each reported into ``problems`` (a ``deep500.recipe.problems.Problems``) at the
        key path of the value it concerns (``recipe.located(component)``)."""

    def new_state(self) -> dict:
        """A cache shared by the configurations of one run (inputs, references)."""
        return {}

    def measure(self, recipe, configuration: dict, tag: str, output_dir: str,
                state: dict):
        """Measure one configuration; returns a TestResult (or raises)."""
        raise NotImplementedError

    def describe(self, configuration: dict) -> dict:
        """The configuration as JSON-ready data for the results file."""
        return dict(configuration)
