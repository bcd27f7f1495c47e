"""One configuration of a recipe measured on one rank, into its record: what the
record says before the measurement (:func:`record_header`), the measurement under the
telemetry sampler with its acceptance checks (:func:`measure_configuration`), and the
configuration's short name (:func:`configuration_label`)."""
from __future__ import annotations

import warnings

from deep500.lv3_distributed.mpi_launch import world_communicator
from deep500.recipe.conditions import Conditions
from deep500.recipe.remeasure import measure_watched
from deep500.utils.errors import Deep500Error
from deep500.utils.storage_errors import StorageError
from deep500.utils.threads import usable_cpu_count
from deep500.utils.wallclock import UnstableMeasurementWarning


def record_header(recipe, configuration: dict, conditions: Conditions, index: int,
                  rank: int, size: int) -> dict:
    """What a record says about its configuration, known before it is measured (its
    ``threads`` are the resolved ones); with ``oversubscribed`` where its ranks x
    threads exceed the CPUs this process may use (allowed, and marked so that its
    times are read as such)."""
    kind = recipe.kind
    threads = conditions.threads
    header = {"kind": "measurement", "level": kind.level, "experiment": kind.name,
              "index": index, "rank": rank, "size": size,
              "configuration": {**kind.describe(configuration), "threads": threads}}
    usable = usable_cpu_count()
    if size * threads > usable:
        header["oversubscribed"] = {"ranks": size, "threads_per_rank": threads,
                                    "usable_cpus": usable}
    return header


def is_collective(kind) -> bool:
    """Whether the ranks measure a configuration together (Level 3: distributed
    training), so that one rank's error leaves the others waiting for it."""
    return getattr(kind, "collective", kind.level == 3)


def measure_configuration(recipe, configuration: dict, header: dict, output_dir: str,
                          state: dict, remeasure_interfered: int = 0,
                          interference_rule=None) -> dict:
    """The record of ``configuration`` (its threads resolved), measured here under the
    conditions in force: ``skipped`` where the experiment does not apply, ``error``
    where the measurement raised (and the others still run), else the result with its
    acceptance checks. An error other than a Deep500Error in a collective measurement
    on several ranks is raised: the other ranks may wait for this one."""
    kind, rank, size = recipe.kind, header["rank"], header["size"]
    record = dict(header)
    skip = kind.applicable(configuration) if hasattr(kind, "applicable") else None
    if skip:
        record.update(kind="skipped", reason=skip)
        return record
    subject = "-".join(str(v) for k, v in configuration.items()
                       if k in ("framework", "executor", "mode"))
    tag = f"{header['index']:04d}-{subject}" + (f"-rank{rank}" if size > 1 else "")
    try:
        with warnings.catch_warnings():
            # Kept in the result and listed in the report; printing them would break
            # the progress bar.
            warnings.simplefilter("ignore", UnstableMeasurementWarning)
            result, watched = measure_watched(
                lambda: kind.measure(recipe, configuration, tag, output_dir, state),
                configuration["threads"], remeasure_interfered, interference_rule,
                world_communicator() if size > 1 else None,
                collective=getattr(kind, "collective", False))
        record.update(watched)
    except Exception as exc:
        if isinstance(exc, StorageError):
            raise  # the run folder's disk: no later configuration could be written either
        if is_collective(kind) and size > 1 and not isinstance(exc, Deep500Error):
            raise  # the other ranks may wait in a collective for this one: run_recipe
        # One failing configuration is recorded and the others still run. (A
        # collective experiment's Deep500Errors are agreed by all its ranks.)
        record.update(kind="error", error=f"{type(exc).__name__}: {exc}")
        return record
    checks = [c for c in (t.check(result.metrics) for t in recipe.acceptance) if c]
    record.update(result=result.to_dict(), acceptance=checks,
                  passed=all(c["passed"] for c in checks))
    return record


def configuration_label(recipe, configuration: dict) -> str:
    """A short name of ``configuration`` for the progress bar: the values of the
    components the recipe varies, e.g. ``Relu 64x256 | pytorch | threads=2``."""
    runners = ("framework", "executor")

    def label(key):
        value = configuration[key]
        if key == "executor" and hasattr(recipe.kind, "executor_name"):
            value = recipe.kind.executor_name(configuration)  # a baseline's own executor
        named = getattr(value, "label", None)
        if named is None and isinstance(value, dict):
            named = value.get("label")
        if named is not None:
            return str(named)
        return str(value) if key in runners else f"{key}={value}"

    def order(key):  # what is measured, by what, under which setting
        if key in runners:
            return 2
        if label(key) == f"{key}={configuration[key]}":
            return 3
        return 0 if key in recipe.kind.input_components else 1

    keys = [k for k in configuration if k in recipe.mutable or k in runners]
    return " | ".join(label(k) for k in sorted(keys, key=order))
