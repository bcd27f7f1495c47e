"""What an experiment kind contributes to recipes: its components, checks, and how one
configuration is measured. The runner does the rest (threads, MPI, records, acceptance).
"""
from __future__ import annotations

from typing import Any, Callable

from deep500.utils.errors import RecipeError

REQUIRED = object()


def positive_int(value, where, recipe_dir=None):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RecipeError(f"{where}: expected a positive integer, got {value!r}")
    return value


def non_negative_int(value, where, recipe_dir=None):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RecipeError(f"{where}: expected a non-negative integer, got {value!r}")
    return value


def dtype(value, where, recipe_dir=None):
    if value not in ("float32", "float64"):
        raise RecipeError(f"{where}: dtype must be float32 or float64, got {value!r}")
    return value


def device(value, where, recipe_dir=None):
    from deep500.utils.device import parse_device
    from deep500.utils.errors import Deep500Error
    try:
        parse_device(value)
    except Deep500Error as exc:
        raise RecipeError(f"{where}: {exc}") from None
    return str(value)


def one_of(choices):
    def validate(value, where, recipe_dir=None):
        if value not in choices:
            raise RecipeError(f"{where}: {value!r} is not one of {list(choices)}")
        return value
    return validate


class Experiment:
    """Base class. Subclasses fill in the class attributes and ``check``/``measure``."""
    name = ""
    level = 0
    # component -> (validator(value, where, recipe_dir), default or REQUIRED)
    components: dict[str, tuple[Callable, Any]] = {}
    # components that define the inputs: varied slowest so cached inputs are reused
    input_components: tuple = ()
    metric_names: tuple = ()

    def check(self, recipe, where: str) -> None:
        """Checks across components (frameworks installed, operators supported, ...)."""

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
