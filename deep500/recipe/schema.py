"""Recipes: YAML files that fix some components, vary others, and say what to measure.

::

    name: quickstart
    experiment: operators          # Level 0: single operators across frameworks
    fixed:     {dtype: float32, threads: 2, device: cpu, seed: 0}
    mutable:                       # every combination of these is run
      framework: [reference, pytorch, tensorflow]
      operator:  [{op: Gemm, from: deepbench_gemm.csv, row: 0}, ...]
    metrics:   {WallclockTime: {reruns: 20, warmup: 3}, FLOPs: {}, L2Error: {}}
    acceptance: ["L2Error.relative <= 1e-4"]

Everything is checked when the recipe is loaded, before any work starts; errors name
the key and the problem.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml

from deep500.recipe import components
from deep500.recipe.acceptance import Threshold, parse_threshold
from deep500.recipe.experiments import EXPERIMENTS
from deep500.recipe.experiments.base import REQUIRED
from deep500.utils.errors import RecipeError

TOP_LEVEL_KEYS = {"name", "description", "experiment", "fixed", "mutable", "metrics",
                  "acceptance", "timeout"}
@dataclass
class Recipe:
    """A checked recipe. ``configurations()`` is the cross product to run."""
    name: str
    path: str
    experiment: str
    fixed: dict
    mutable: dict
    metric_params: dict
    metric_builders: dict = field(repr=False)
    acceptance: list[Threshold]
    description: str = ""
    raw: dict = field(default_factory=dict, repr=False)
    timeout: float | None = None  # seconds one configuration may take on any rank

    @property
    def kind(self):
        """The experiment object (components, checks, measurement)."""
        return EXPERIMENTS[self.experiment]

    def alternatives(self, component: str) -> list:
        """Every value ``component`` takes in this recipe."""
        if component in self.mutable:
            return list(self.mutable[component])
        return [self.fixed.get(component)]

    def needs_reference(self) -> bool:
        """Whether a metric compares with reference values."""
        return any(getattr(b(os.devnull, "check"), "needs_reference", False)
                   for b in self.metric_builders.values())

    def configurations(self) -> list[dict]:
        """Every combination of the mutable alternatives, merged with the fixed values."""
        # Components that define the inputs vary slowest, so consecutive configurations
        # share inputs and reference outputs.
        order = self.kind.input_components
        keys = sorted(self.mutable, key=lambda k: order.index(k) if k in order else len(order))
        combos = itertools.product(*(self.mutable[k] for k in keys)) if keys else [()]
        return [{**self.fixed, **dict(zip(keys, combo))} for combo in combos]

    def build_metrics(self, output_dir: str, tag: str) -> list:
        """Fresh metric instances for one measurement; FLOPs reads the timer's median."""
        metrics = [build(output_dir, tag) for build in self.metric_builders.values()]
        timers = [m for m in metrics if m.name == "WallclockTime"]
        operator_times = [m for m in metrics if m.name == "OperatorTimes"]
        for metric in metrics:
            if metric.name == "FLOPs" and timers:
                metric.timer = timers[0]
            if metric.name == "FrameworkOverhead" and operator_times:
                metric.operator_times = operator_times[0]  # one set of operator hooks
        return metrics


def load_recipe(path: str) -> Recipe:
    """Read and check a recipe file; raises RecipeError naming the key and the problem."""
    if not os.path.isfile(path):
        raise RecipeError(f"Recipe file {path!r} does not exist")
    with open(path, encoding="utf-8") as handle:
        try:
            raw = yaml.safe_load(handle)
        except yaml.YAMLError as exc:
            raise RecipeError(f"{path}: not valid YAML: {exc}") from None
    return parse_recipe(raw, path)


def parse_recipe(raw, path: str = "<recipe>") -> Recipe:
    where = os.path.basename(path)
    recipe_dir = os.path.dirname(os.path.abspath(path))
    if not isinstance(raw, dict):
        raise RecipeError(f"{where}: a recipe is a YAML mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - TOP_LEVEL_KEYS)
    if unknown:
        raise RecipeError(f"{where}: unknown keys {unknown}; a recipe has "
                          f"{sorted(TOP_LEVEL_KEYS)}")
    name = raw.get("name") or os.path.splitext(where)[0]
    experiment = raw.get("experiment", "operators")
    if experiment not in EXPERIMENTS:
        raise RecipeError(f"{where}.experiment: {experiment!r} is not supported; "
                          f"supported: {list(EXPERIMENTS)}")
    kind = EXPERIMENTS[experiment]
    component_table = kind.components

    fixed_raw = raw.get("fixed") or {}
    mutable_raw = raw.get("mutable") or {}
    for key, value in (("fixed", fixed_raw), ("mutable", mutable_raw)):
        if not isinstance(value, dict):
            raise RecipeError(f"{where}.{key}: must be a mapping of component names")
    overlap = sorted(set(fixed_raw) & set(mutable_raw))
    if overlap:
        raise RecipeError(f"{where}: {overlap} are both fixed and mutable; a component is "
                          f"either held fixed or varied, not both")
    for section, values in (("fixed", fixed_raw), ("mutable", mutable_raw)):
        for key in values:
            if key not in component_table:
                raise RecipeError(f"{where}.{section}.{key}: unknown component; an "
                                  f"'{experiment}' recipe has {sorted(component_table)}")

    fixed, mutable = {}, {}
    for key, (validate, default) in component_table.items():
        if key in fixed_raw:
            fixed[key] = validate(fixed_raw[key], f"{where}.fixed.{key}", recipe_dir)
        elif key in mutable_raw:
            alternatives = mutable_raw[key]
            if not isinstance(alternatives, list) or not alternatives:
                raise RecipeError(f"{where}.mutable.{key}: must be a non-empty list of "
                                  f"alternatives, got {alternatives!r}")
            mutable[key] = [validate(v, f"{where}.mutable.{key}[{i}]", recipe_dir)
                            for i, v in enumerate(alternatives)]
        elif default is REQUIRED:
            raise RecipeError(f"{where}: component '{key}' is required, in 'fixed' or "
                              f"'mutable'")
        else:
            fixed[key] = default

    metrics_raw = raw.get("metrics") or {"WallclockTime": {}}
    if isinstance(metrics_raw, list):
        metrics_raw = {m: {} for m in metrics_raw}
    if not isinstance(metrics_raw, dict):
        raise RecipeError(f"{where}.metrics: a mapping of metric names to parameters")
    metric_params = {k: dict(v or {}) for k, v in metrics_raw.items()}
    for metric_name in metric_params:
        if metric_name not in kind.metric_names:
            raise RecipeError(f"{where}.metrics: unknown metric {metric_name!r} for an "
                              f"'{experiment}' recipe; known: {sorted(kind.metric_names)}")
    builders = {k: components.metric_factory(k, v, f"{where}.metrics")
                for k, v in metric_params.items()}

    acceptance_raw = raw.get("acceptance") or []
    if not isinstance(acceptance_raw, list):
        raise RecipeError(f"{where}.acceptance: a list of thresholds")
    acceptance = [parse_threshold(t, f"{where}.acceptance[{i}]", metric_params)
                  for i, t in enumerate(acceptance_raw)]

    timeout = raw.get("timeout")
    if timeout is not None:
        if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                or not timeout > 0 or timeout == float("inf")):
            raise RecipeError(f"{where}.timeout: seconds one configuration may take, a "
                              f"positive number; got {timeout!r}")
        timeout = float(timeout)

    recipe = Recipe(name=str(name), path=os.path.abspath(path), experiment=experiment,
                    fixed=fixed, mutable=mutable, metric_params=metric_params,
                    metric_builders=builders, acceptance=acceptance,
                    description=str(raw.get("description", "")), raw=raw,
                    timeout=timeout)
    kind.check(recipe, where)
    return recipe
