"""What a recipe can name: frameworks, metrics and allreduce algorithms, by name."""
from __future__ import annotations

import os
from typing import Callable

from deep500.frameworks import registry
from deep500.lv0_operators.custom_op import CustomOp
from deep500.recipe.operator_spec import OperatorSpec
from deep500.recipe.problems import VALUE_ERRORS, describe, show
from deep500.recipe.typed_schema import argument_problems
from deep500.utils.errors import Deep500Error, MissingDependencyError, RecipeError

def _framework(name: str):
    """The registry's entry of a framework that has native operators (level 0)."""
    try:
        framework = registry.get(name)
    except Deep500Error as exc:
        raise RecipeError(str(exc)) from None
    if not framework.capabilities.native_operators:
        raise RecipeError(f"framework {name!r} has no operators of its own; frameworks "
                          f"with operators: {registry.names(native_operators=True)}")
    return framework


def registered_name(value, what: str, where: str, known, hint: str = "") -> str:
    """``value`` if it names one of ``known`` (framework or executor names from the
    registry), else a RecipeError listing them, with the closest match."""
    if not isinstance(value, str):
        raise RecipeError(f"{where}: expected a{'n' if what[:1] in 'aeiou' else ''} {what} "
                          f"name (a string){hint}, got {describe(value)}")
    if value not in known:
        raise RecipeError(f"{where}: unknown {what} {value!r}{hint}; registered: "
                          f"{', '.join(sorted(known))}.{registry.suggestion(value, known)}")
    return value


def allreduce_algorithm_name(value, where: str) -> str:
    """``value`` if it names an allreduce algorithm of the registry
    (``deep500.lv3_distributed.collectives``), else a RecipeError listing them: the one
    place a recipe's allreduce algorithm is checked; what runs it looks it up."""
    from deep500.lv3_distributed.collectives import allreduce_names
    return registered_name(value, "allreduce algorithm", where, allreduce_names())


def framework_names() -> list[str]:
    """Frameworks a recipe can compare operators of."""
    return registry.names(native_operators=True)


def framework_module(name: str):
    framework = _framework(name)
    try:
        return framework.load()
    except MissingDependencyError as exc:
        raise RecipeError(f"framework {name!r}: {exc}") from None


def check_device(framework: str, device) -> None:
    """Raise a RecipeError if ``framework`` cannot run on ``device`` on this machine."""
    from deep500.utils.device import parse_device
    device = parse_device(device)
    if not device.is_gpu:
        return
    entry = _framework(framework)
    if "gpu" not in entry.capabilities.devices:
        raise RecipeError(f"the {entry.description} runs on the CPU only; use device: cpu "
                          f"for {framework}")
    framework_module(framework)
    count = entry.gpus()
    if device.index >= count:
        raise RecipeError(f"{framework} sees {count} GPU(s) on this machine, so device "
                          f"{device} is not available")


def create_operator(framework: str, spec: OperatorSpec, device) -> CustomOp:
    """The framework's implementation of ``spec`` (reference: the NumPy operator)."""
    entry = _framework(framework)
    framework_module(framework)
    factory = entry.native_operator_factory()
    attributes = dict(spec.attributes)
    if "gpu" not in entry.capabilities.devices:
        return factory(spec.op_type, **attributes)
    return factory(spec.op_type, device=device, **attributes)


def _metric_classes() -> dict[str, type]:
    import deep500 as d5
    from deep500.lv2_training.trajectory_metric import TrajectoryDivergenceMetric
    from deep500.lv3_distributed.prediction_metric import StepTimePrediction
    from deep500.lv3_distributed.mpi_profiling import MPIProfiling
    from deep500.lv3_distributed.timeline_metric import Timeline
    classes = {cls.__name__: cls for cls in (d5.WallclockTime, d5.FLOPs, d5.L1Error,
                                             d5.L2Error, d5.MaxError, d5.DiffHeatmap,
                                             d5.VarHeatmap, d5.OperatorTimes,
                                             d5.FrameworkOverhead, d5.PeakMemory,
                                             d5.TrainingAccuracy, d5.TestAccuracy,
                                             d5.TimeToAccuracy, d5.LossCurve,
                                             d5.Energy, d5.DatasetLatency)}
    classes["TrajectoryDivergence"] = TrajectoryDivergenceMetric
    classes["StepTimePrediction"] = StepTimePrediction
    classes["Timeline"] = Timeline
    classes["MPIProfiling"] = MPIProfiling
    return classes

_FILE_METRICS = ("DiffHeatmap", "VarHeatmap")


def metric_fields(name: str) -> tuple | None:
    """The summary fields metric ``name`` declares (``fields`` on its class), or None
    when it declares none (thresholds on it are then checked only when judged)."""
    cls = _metric_classes().get(name)
    fields = getattr(cls, "fields", None)
    return tuple(fields) if fields is not None else None


# Filled in by Deep500 when the metric is built, never by the recipe.
_INTERNAL_PARAMETERS = ("path", "timer", "operator_times")


def metric_factory(name: str, params: dict, where: str) -> Callable[[str, str], object]:
    """A function (output_dir, tag) -> metric instance. The parameters are checked now,
    against the class's constructor signature (names and annotated types) and by
    constructing one instance, so wrong parameters fail before any work."""
    classes = _metric_classes()
    if name not in classes:
        raise RecipeError(f"{where}: unknown metric {name!r}; known: {sorted(classes)}")
    cls = classes[name]
    if not isinstance(params, dict):
        raise RecipeError(f"{where}: parameters must be a mapping, got {show(params)}")
    problems = argument_problems(cls, params, where, ignore=_INTERNAL_PARAMETERS)
    if problems:
        problems = [p if not p.startswith(f"{where}: ") else
                    f"{where}: bad parameters {show(params)}: {p[len(where) + 2:]}"
                    for p in problems]
        error = RecipeError("; ".join(problems))
        error.problems = problems
        raise error

    def build(output_dir: str, tag: str):
        kwargs = dict(params)
        if name in _FILE_METRICS:
            kwargs["path"] = os.path.join(output_dir, "heatmaps", f"{name}-{tag}.png")
        elif name == "Timeline":
            kwargs["path"] = os.path.join(output_dir, "timeline", f"{tag}.json")
        return cls(**kwargs)

    try:  # construct once now so wrong values fail before any work
        build(os.devnull, "check")
    except (Deep500Error, *VALUE_ERRORS) as exc:
        raise RecipeError(f"{where}: bad parameters {show(params)}: {exc}") from None
    return build
