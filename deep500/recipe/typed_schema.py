"""The type layer of a recipe, checked with pydantic (v2) before any meaning is read.

It fixes what each top-level key holds:

- ``name``, ``description``: text (a number is taken as text);
- ``experiment``: the name of an experiment kind (a string);
- ``fixed``: a mapping of component names (strings) to values;
- ``mutable``: a mapping of component names to non-empty lists of alternatives;
- ``metrics``: a mapping of metric names to their parameters (a mapping, or empty),
  or a list of metric names;
- ``acceptance``: a list of threshold strings;
- ``timeout``: seconds one configuration may take, a positive, finite number;
- ``machine``: a machine file (``deep500.utils.machine``): a path relative to the
  recipe's folder, or the name of a machine file shipped with Deep500.

Whether a component, metric or framework exists, and whether a value suits it, is
checked afterwards by the experiment's validators (``deep500.recipe.schema``);
:func:`structure_problems` returns every type problem with its key path so that those
checks can skip exactly the parts that are already known to be wrong.
"""
from __future__ import annotations

import inspect
import types
import typing
from typing import Annotated, Any, Optional

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter,
                      ValidationError)

from deep500.recipe.problems import describe, key_path, show

TOP_LEVEL_KEYS = ("name", "description", "experiment", "fixed", "mutable", "metrics",
                  "acceptance", "timeout", "machine", "cluster")


def _text(value):
    """Names and descriptions may be written as numbers (``name: 2024``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def _metric_list(value):
    """``metrics: [WallclockTime, L2Error]`` is ``{WallclockTime: {}, L2Error: {}}``."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {v: None for v in value}
    return value


Text = Annotated[str, BeforeValidator(_text)]
Alternatives = Annotated[list[Any], Field(min_length=1)]
MetricParameters = Optional[dict[str, Any]]


class RecipeModel(BaseModel):
    """The top level of a recipe file."""
    model_config = ConfigDict(extra="forbid", strict=True)

    name: Optional[Text] = None
    description: Optional[Text] = None
    experiment: str = "operators"
    fixed: Optional[dict[str, Any]] = None
    mutable: Optional[dict[str, Alternatives]] = None
    metrics: Annotated[Optional[dict[str, MetricParameters]],
                       BeforeValidator(_metric_list)] = None
    acceptance: Optional[list[str]] = None
    timeout: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = None
    machine: Optional[Annotated[str, Field(min_length=1)]] = None
    cluster: Optional[dict[str, Any]] = None


# What a value at a key path must be; "*" stands for any key or index.
_EXPECTED = {
    ("name",): "must be text, got {got}",
    ("description",): "must be text, got {got}",
    ("cluster",): "must be a mapping such as {{nodes: 2, rate: 1gbit}}, got {got}",
    ("experiment",): "must be the name of an experiment (a string), got {got}",
    ("fixed",): "must be a mapping of component names to values, got {got}",
    ("mutable",): "must be a mapping of component names to lists of alternatives, "
                  "got {got}",
    ("mutable", "*"): "must be a non-empty list of alternatives, got {got}",
    ("metrics",): "must be a mapping of metric names to parameters (or a list of metric "
                  "names), got {got}",
    ("metrics", "*"): "parameters must be a mapping (e.g. {{reruns: 10}}) or empty, "
                      "got {got}",
    ("acceptance",): "a list of thresholds like 'L2Error.relative <= 1e-4', got {got}",
    ("acceptance", "*"): "a threshold is a string like 'L2Error.relative <= 1e-4', "
                         "got {got}",
    ("timeout",): "seconds one configuration may take, a positive number; got {got}",
    ("machine",): "a machine file: a path relative to the recipe's folder, or the name "
                  "of a shipped machine (e.g. infiniband-hdr); got {got}",
}
_KEY_OF = {"fixed": "component", "mutable": "component", "metrics": "metric",
           "metrics.*": "parameter"}


def _pattern(loc: tuple) -> tuple:
    return (loc[0],) + ("*",) * (len(loc) - 1)


def structure_problems(raw: dict) -> list[tuple[tuple, str]]:
    """Every type problem of the top level as ``(location, message)``; the location is
    the tuple of keys and indices (``("mutable", "framework")``) and the message starts
    with its key path. Unknown top-level keys are one problem at location ``()``."""
    try:
        RecipeModel.model_validate(raw)
        return []
    except ValidationError as error:
        errors = error.errors()
    problems, unknown = [], []
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] in ("extra_forbidden", "invalid_key") and len(loc) == 1:
            unknown.append(loc[0])
            continue
        if loc and loc[-1] == "[key]":  # a mapping key that is not a string
            where = key_path(*loc[:-2])
            what = _KEY_OF.get(".".join(_pattern(loc[:-2])), "key")
            problems.append((loc[:-1], f"{where}: {what} names are strings, got "
                                       f"{describe(loc[-2])}"))
            continue
        template = _EXPECTED.get(_pattern(loc)) if loc else None
        message = (template.format(got=describe(err["input"])) if template else
                   f"{err['msg']}, got {describe(err['input'])}")
        problems.append((loc, f"{key_path(*loc)}: {message}"))
    if unknown:
        names = sorted(unknown, key=str)
        problems.insert(0, ((), f"unknown keys {names}; a recipe has "
                                f"{sorted(TOP_LEVEL_KEYS)}"))
    return problems


def _annotation_adapter(hint) -> TypeAdapter | None:
    try:
        return TypeAdapter(hint, config=ConfigDict(arbitrary_types_allowed=True,
                                                   strict=True))
    except Exception:  # a hint pydantic cannot check (a protocol, a forward name)
        return None


def argument_problems(function, arguments: dict, where: str,
                      ignore: tuple = ()) -> list[str]:
    """Problems of ``function(**arguments)`` found from its signature alone: unknown
    names, missing required ones, and values that do not match a parameter's type
    annotation (checked strictly: ``"5"`` is no ``int``, ``True`` no ``float``).
    ``where`` is the key path of ``arguments``; parameters in ``ignore`` are filled in
    by Deep500, not by the recipe."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return []
    parameters = {n: p for n, p in signature.parameters.items() if n not in ignore}
    name = getattr(function, "__name__", "it")
    problems = []
    bad_keys = [k for k in arguments if not isinstance(k, str)]
    if bad_keys:
        problems.append(f"{where}: parameter names are strings, got {show(bad_keys)}")
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        unknown = sorted(k for k in arguments if isinstance(k, str) and k not in parameters)
        if unknown:
            accepted = sorted(n for n, p in parameters.items()
                              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
            problems.append(f"{where}: {name} takes no {unknown}; it takes "
                            f"{accepted or 'no parameters'}")
    try:
        hints = typing.get_type_hints(function.__init__ if inspect.isclass(function)
                                      else function)
    except Exception:  # annotations naming what the module never imports
        hints = {}
    for key, value in arguments.items():
        if not isinstance(key, str) or key not in hints or key not in parameters:
            continue
        adapter = _annotation_adapter(hints[key])
        if adapter is None:
            continue
        try:
            adapter.validate_python(value)
        except ValidationError as exc:
            expected = _type_name(hints[key])
            problems.append(f"{key_path(where, key)}: expected {expected}, got "
                            f"{describe(value)}" + _first_reason(exc))
        except Exception:
            continue
    return problems


def _first_reason(exc: ValidationError) -> str:
    errors = exc.errors()
    if errors and errors[0]["type"] in ("greater_than", "greater_than_equal", "less_than",
                                        "less_than_equal", "finite_number"):
        return f" ({errors[0]['msg'].lower()})"
    return ""


def _type_name(hint) -> str:
    origin = typing.get_origin(hint)
    if origin is None:
        if hint is type(None):
            return "nothing"
        return {int: "an integer", float: "a number", str: "a string",
                bool: "a boolean"}.get(hint, getattr(hint, "__name__", str(hint)))
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        optional = " or nothing" if type(None) in args else ""
        return " or ".join(names) + optional
    return str(hint).replace("typing.", "")
