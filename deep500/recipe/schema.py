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
    machine:   machine.yaml            # optional: a machine file (recipe.machine)

Everything is checked when the recipe is loaded, before any work starts, in two
layers: the types of the top level (``deep500.recipe.typed_schema``, pydantic), then
what the values mean (components, frameworks, operators, files, metrics). Every problem
found is reported at once, each with its key path, in one RecipeError::

    recipe.yaml: 2 problems (nothing was run):
      recipe.yaml: metrics.L2Error: parameters must be a mapping (e.g. {reruns: 10}) or
        empty, got the number 5
      recipe.yaml: mutable.framework[0]: expected a framework name (a string), or a C++
        kernel {cpp: SOURCE, op: ONNX_OPERATOR}, got a list ['reference']

(each on one line). The type layer's problems come first; a part whose type is wrong is
not checked further, so one mistake is reported once.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any

from deep500.lv3_distributed.cluster.spec import cluster_from_mapping
from deep500.recipe import components, machine_file, typed_schema
from deep500.recipe.acceptance import Threshold, parse_threshold
from deep500.recipe.experiments import EXPERIMENTS
from deep500.recipe.experiments.base import REQUIRED
from deep500.recipe.launch_environment import LAUNCH_KEYS
from deep500.recipe.problems import VALUE_ERRORS, Problems, describe, key_path
from deep500.recipe.recipe_yaml import read_recipe_yaml
from deep500.recipe.several import Several
from deep500.utils.errors import RecipeError

TOP_LEVEL_KEYS = set(typed_schema.TOP_LEVEL_KEYS)  # timeout included


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
    # The machine file (``machine:``, or ``deep500 run --machine``), loaded and
    # validated: a ``deep500.utils.machine.MachineModel``, or None.
    machine: Any = field(default=None, repr=False)
    machine_path: str | None = None   # its absolute path
    machine_given_by: str | None = None  # "recipe" or "--machine"
    # The emulated cluster the recipe runs in (``cluster:``; docs/cluster_emulation.md):
    # a ``deep500.lv3_distributed.cluster.ClusterSpec``, or None.
    cluster: Any = None
    # For a mutable component one of whose entries stands for several alternatives
    # (``rows:``): the index of the entry each alternative came from, for key paths.
    entry_of: dict = field(default_factory=dict, repr=False)

    @property
    def kind(self):
        """The experiment object (components, checks, measurement)."""
        return EXPERIMENTS[self.experiment]

    def alternatives(self, component: str) -> list:
        """Every value ``component`` takes in this recipe."""
        if component in self.mutable:
            return list(self.mutable[component])
        return [self.fixed.get(component)]

    def located(self, component: str) -> list[tuple[str, Any]]:
        """``(key path, value)`` of every value ``component`` takes, for messages."""
        if component in self.mutable:
            entries = self.entry_of.get(component, range(len(self.mutable[component])))
            return [(key_path("mutable", component, i), value)
                    for i, value in zip(entries, self.mutable[component])]
        return [(key_path("fixed", component), self.fixed.get(component))]

    def rank_counts(self) -> list[int] | None:
        """The distinct numbers of MPI ranks the recipe asks for (its ``ranks``
        component, fixed or mutable), in the order the configurations first use them;
        ``None`` when it names none (the ranks are then whatever ``mpirun`` started)."""
        if "ranks" not in self.kind.components:
            return None
        counts = [c.get("ranks") for c in self.configurations()]
        if all(count is None for count in counts):
            return None
        return list(dict.fromkeys(counts))

    def ranks_key(self) -> str:
        """Where the recipe gives ``ranks`` (``mutable.ranks`` or ``fixed.ranks``)."""
        return "mutable.ranks" if "ranks" in self.mutable else "fixed.ranks"

    def needs_reference(self) -> bool:
        """Whether a metric compares with reference values."""
        return any(getattr(b(os.devnull, "check"), "needs_reference", False)
                   for b in self.metric_builders.values())

    def configurations(self) -> list[dict]:
        """Every combination of the mutable alternatives, merged with the fixed values."""
        # Components that define the inputs vary slowest, so consecutive configurations
        # share inputs and reference outputs; the number of ranks and the launch
        # settings slower still, since each of their combinations runs as its own
        # mpirun job (deep500.recipe.rank_grid).
        order = ("ranks", *LAUNCH_KEYS, *self.kind.input_components)
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
    """Read and check a recipe file; raises one RecipeError listing every problem, each
    with its key path."""
    return parse_recipe(read_recipe_yaml(path), path)


def parse_recipe(raw, path: str = "<recipe>") -> Recipe:
    """Check a parsed recipe (the mapping ``load_recipe`` reads from YAML); raises one
    RecipeError listing every problem, each with its key path."""
    try:
        return _parse_recipe(raw, path)
    except VALUE_ERRORS as exc:  # a check that missed a case: still no raw traceback
        raise RecipeError(f"{os.path.basename(str(path))}: the recipe could not be checked "
                          f"({type(exc).__name__}: {exc}); please report this to Deep500 "
                          f"with the recipe") from exc


def _parse_recipe(raw, path: str) -> Recipe:
    where = os.path.basename(str(path))
    recipe_dir = os.path.dirname(os.path.abspath(str(path)))
    problems = Problems(where)
    if not isinstance(raw, dict):
        raise RecipeError(f"{where}: a recipe is a YAML mapping of keys "
                          f"{sorted(TOP_LEVEL_KEYS)}, got {describe(raw)}")
    structure = typed_schema.structure_problems(raw)
    for _, message in structure:
        problems.add("", message)
    bad = [loc for loc, _ in structure]

    def broken(*loc) -> bool:
        """Whether ``loc`` is already reported (it or a key above it has a bad type)."""
        return any(loc[:len(b)] == b for b in bad)

    name = raw.get("name") if not broken("name") else None
    name = str(name) if name not in (None, "") else os.path.splitext(where)[0]
    experiment = raw.get("experiment", "operators")
    kind = None
    if not broken("experiment"):
        if experiment in EXPERIMENTS:
            kind = EXPERIMENTS[experiment]
        else:
            problems.add("experiment", f"{experiment!r} is not supported; supported: "
                                       f"{list(EXPERIMENTS)}")

    fixed, mutable, entry_of, components_ok = {}, {}, {}, False
    if kind is not None:
        before = len(problems)
        fixed, mutable, entry_of = _components(raw, kind, recipe_dir, problems, broken)
        components_ok = len(problems) == before and not any(
            loc[:1] in (("fixed",), ("mutable",)) for loc in bad)

    metric_params, builders = _metrics(raw, kind, problems, broken)
    acceptance = []
    if not broken("acceptance"):
        measured = _metric_names(raw, broken)
        for index, text in enumerate(raw.get("acceptance") or []):
            at = key_path("acceptance", index)
            if broken("acceptance", index):
                continue
            with problems.check(at, text):
                acceptance.append(parse_threshold(text, at, measured))
    timeout = raw.get("timeout")
    timeout = float(timeout) if timeout is not None and not broken("timeout") else None
    machine = machine_path = None
    if raw.get("machine") is not None and not broken("machine"):
        with problems.check("machine", raw["machine"]):
            machine, machine_path = machine_file.load(raw["machine"], recipe_dir)
    cluster = None
    if raw.get("cluster") is not None and not broken("cluster"):
        with problems.check("cluster", raw["cluster"]):
            cluster = cluster_from_mapping(raw["cluster"], "cluster")

    recipe = Recipe(name=name, path=os.path.abspath(str(path)), experiment=str(experiment),
                    fixed=fixed, mutable=mutable, metric_params=metric_params,
                    metric_builders=builders, acceptance=acceptance,
                    description=str(raw.get("description") or "")
                    if not broken("description") else "", raw=raw, timeout=timeout,
                    machine=machine, machine_path=machine_path,
                    machine_given_by="recipe" if machine is not None else None,
                    cluster=cluster, entry_of=entry_of)
    if components_ok:  # cross-checks need every component's value
        with problems.check(""):
            kind.check(recipe, problems)
    problems.raise_if_any()
    return recipe


def _components(raw: dict, kind, recipe_dir: str, problems: Problems, broken):
    """Each component's value(s) through the experiment's validator."""
    table = kind.components
    sections = {}
    for section in ("fixed", "mutable"):
        value = raw.get(section)
        sections[section] = (value if isinstance(value, dict) and not broken(section)
                             else {})
    fixed_raw, mutable_raw = sections["fixed"], sections["mutable"]
    overlap = sorted((set(fixed_raw) & set(mutable_raw)), key=str)
    if overlap:
        problems.add("", f"{overlap} are both fixed and mutable; a component is either "
                         f"held fixed or varied, not both")
    for section, values in sections.items():
        for key in values:
            if isinstance(key, str) and key not in table:
                problems.add(key_path(section, key),
                             f"unknown component; an '{kind.name}' recipe has "
                             f"{sorted(table)}")

    fixed, mutable, entry_of = {}, {}, {}
    for key, (validate, default) in table.items():
        if key in fixed_raw:
            at = key_path("fixed", key)
            with problems.check(at, fixed_raw[key]):
                fixed[key] = validate(fixed_raw[key], at, recipe_dir)
                if isinstance(fixed[key], Several):
                    raise RecipeError(f"{at}: this entry stands for {len(fixed[key])} "
                                      f"alternatives; list it under 'mutable' to run "
                                      f"each, or name one (e.g. row: N)")
        elif key in mutable_raw:
            if broken("mutable", key):
                continue
            alternatives, entries = [], []
            for index, value in enumerate(mutable_raw[key]):
                at = key_path("mutable", key, index)
                with problems.check(at, value):
                    checked = validate(value, at, recipe_dir)
                    several = list(checked) if isinstance(checked, Several) else [checked]
                    alternatives += several
                    entries += [index] * len(several)
            mutable[key] = alternatives
            if len(entries) != len(mutable_raw[key]):
                entry_of[key] = entries
        elif default is REQUIRED:
            if not broken("fixed") and not broken("mutable"):  # else it may be there
                problems.add("", f"component '{key}' is required, in 'fixed' or "
                                 f"'mutable'")
        else:
            fixed[key] = default
    return fixed, mutable, entry_of


def _metric_names(raw: dict, broken) -> list[str] | None:
    """The metrics the recipe names (for thresholds), even those with bad parameters;
    None when the metrics are unreadable (thresholds then name any metric)."""
    metrics = raw.get("metrics")
    if broken("metrics") and not isinstance(metrics, (dict, list)):
        return None
    if not metrics:
        kind = EXPERIMENTS.get(raw.get("experiment", "operators")) \
            if isinstance(raw.get("experiment", "operators"), str) else None
        return list(kind.default_metrics if kind else ("WallclockTime",))
    return [m for m in metrics if isinstance(m, str)]


def _metrics(raw: dict, kind, problems: Problems, broken) -> tuple[dict, dict]:
    """``{name: parameters}`` and ``{name: factory}`` of the metrics that check out."""
    default = kind.default_metrics if kind is not None else ("WallclockTime",)
    metrics_raw = raw.get("metrics") or {name: {} for name in default}
    if broken("metrics"):
        return {}, {}
    if isinstance(metrics_raw, list):
        metrics_raw = {m: {} for m in metrics_raw}
    params, builders = {}, {}
    for name, value in metrics_raw.items():
        at = key_path("metrics", name)
        if not isinstance(name, str) or broken("metrics", name):
            continue
        if kind is not None and name not in kind.metric_names:
            problems.add(at, f"unknown metric {name!r} for an '{kind.name}' recipe; "
                             f"known: {sorted(kind.metric_names)}")
            continue
        params[name] = dict(value or {})
        with problems.check(at, value):
            builders[name] = components.metric_factory(name, params[name], at)
    return params, builders
