"""Training runs as MLPerf logs: ``deep500 report DIR --mlperf`` writes, for each training
configuration of the run folder DIR (Level 2 and Level 3 records with per-epoch
statistics; rank 0's for Level 3), ``DIR/mlperf/<index>-<label>.log``: one run per file,
as MLPerf training's ``result_N.txt``, and checks each with MLCommons' compliance checker
(:mod:`.mlperf_compliance`).

The lines are written by MLCommons' own logger, ``mlperf_logging.mllog.MLLogger``
(``:::MLLOG {"namespace", "time_ms", "event_type", "key", "value", "metadata"}``), with
its keys (``mllog/constants.py``):

- ``submission_*`` (``org`` "unspecified", ``division`` open, ``status`` research,
  ``benchmark`` the network, ``platform`` the CPU), ``cache_clear`` (false: Deep500 does
  not drop the OS page cache), the run's configuration (batch sizes, optimizer, seed,
  samples, numerical precision and parallelism);
- ``init_start``/``init_stop``: from the configuration's measured start (its telemetry
  start) to the start of training (``details["training_started_unix"]``: datasets,
  network and executor built);
- ``run_start``; per epoch ``epoch_start``, ``epoch_stop`` (after its training steps),
  ``eval_start``, ``eval_accuracy`` (test accuracy), ``eval_stop``; ``epoch_num`` counts
  from 1; ``run_stop`` with its ``status``.

The log is written after the run, from the records in ``results.jsonl``, with explicit
``time_ms``: durations are the measured ones (each epoch's data + step time, then its
validation time); absolute times are exact where the record has them (the starts) and
sums of durations after. As in MLPerf, the run stops when the recipe's
``TimeToAccuracy`` target is first reached (``success``; later epochs are not logged)
and is ``aborted`` when it never is; without a target, a run that trained every epoch
is a ``success``.
"""
from __future__ import annotations

import datetime
import io
import logging
import os
import re
import sys
from dataclasses import dataclass, field

from deep500.results.files import read_manifest, read_results
from deep500.results.safe_write import prepare_folder, write_atomically
from deep500.utils.errors import require

PREFIX = ":::MLLOG "
FOLDER = "mlperf"

_PRECISIONS = {"float64": "fp64", "float32": "fp32", "float16": "fp16",
               "bfloat16": "bfloat16"}


@dataclass
class _Event:
    """One MLPerf log event: ``kind`` is mllog's ``event``, ``start`` or ``end``."""
    kind: str
    key: str
    time_s: float
    value: object = None
    metadata: dict = field(default_factory=dict)


def _epochs(record: dict) -> list[dict]:
    details = (record.get("result") or {}).get("details") or {}
    return [e for e in (details.get("statistics") or {}).get("epochs") or []
            if e.get("completed", True)]


def _metric(record: dict, name: str) -> dict | None:
    for entry in (record.get("result") or {}).get("metrics") or []:
        if entry.get("metric") == name:
            return entry
    return None


def _start_time(record: dict, manifest: dict) -> float:
    started = (record.get("telemetry_series") or {}).get("started_unix")
    if isinstance(started, (int, float)):
        return float(started)
    try:
        return datetime.datetime.fromisoformat(manifest["started"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return 0.0


def _training_start(record: dict, configuration_start: float) -> float:
    details = (record.get("result") or {}).get("details") or {}
    started = details.get("training_started_unix")
    if isinstance(started, (int, float)) and started >= configuration_start:
        return float(started)
    return configuration_start   # records before the start was kept: no init time


def _comm_precision(configuration: dict) -> str:
    scheme = configuration.get("scheme") or {}
    wire = scheme.get("comm_dtype", "float32") if isinstance(scheme, dict) else "float32"
    return _PRECISIONS.get(str(wire), "fp32")


def _recipe_file(manifest: dict) -> str:
    recipe = manifest.get("recipe") or {}
    path = recipe.get("path") if isinstance(recipe, dict) else None
    return os.path.basename(path) if path else "unknown recipe"


def _configuration_events(record: dict, manifest: dict, t: float) -> list[_Event]:
    configuration = record.get("configuration") or {}
    conditions = ((record.get("result") or {}).get("details") or {}).get(
        "statistics", {}).get("conditions") or {}
    optimizer = configuration.get("optimizer") or {}
    network = configuration.get("network") or {}
    per_rank = configuration.get("batch_size") or 0
    linear = _PRECISIONS.get(str(configuration.get("dtype", "float32")), "fp32")
    values = [
        ("submission_org", "unspecified"),
        ("submission_division", "open"),
        ("submission_status", "research"),
        ("submission_benchmark",
         network.get("label") if isinstance(network, dict) else str(network)),
        ("submission_platform", (manifest.get("hardware") or {}).get("cpu_model")
         or "unknown CPU"),
        ("cache_clear", False),
        ("config_filename", _recipe_file(manifest)),
        ("global_batch_size", per_rank * (record.get("size") or 1)),
        ("micro_batch_size", per_rank),
        ("opt_name", optimizer.get("type")),
        ("opt_base_learning_rate", optimizer.get("learning_rate")),
        ("seed", configuration.get("seed")),
        ("train_samples", conditions.get("train_samples")),
        ("eval_samples", conditions.get("validation_samples")),
        ("lowest_numerical_precision_in_linear", linear),
        ("lowest_numerical_precision_in_attn", linear),
        ("lowest_numerical_precision_in_comm", _comm_precision(configuration)),
        ("tensor_parallelism", 1),
        ("pipeline_parallelism", 1),
        ("context_parallelism", 1),
        ("expert_parallelism", 1),
    ]
    return [_Event("event", key, t, value) for key, value in values]


def mlperf_events(record: dict, manifest: dict) -> list[_Event]:
    """The MLPerf log events of one training record (module docstring); [] when the
    record has no per-epoch statistics."""
    epochs = _epochs(record)
    if record.get("kind") != "measurement" or not epochs:
        return []
    configuration = record.get("configuration") or {}
    target = _metric(record, "TimeToAccuracy")
    goal = (target or {}).get("summary", {}).get("target")
    init = _start_time(record, manifest)
    t = _training_start(record, init)
    events = [_Event("start", "init_start", init)]
    events += _configuration_events(record, manifest, init)
    events += [
        _Event("end", "init_stop", t),
        _Event("start", "run_start", t, None,
               {"deep500_index": record.get("index"), "deep500_label": record.get("label"),
                "deep500_executor": configuration.get("executor") or
                configuration.get("framework"), "target_accuracy": goal}),
    ]
    reached = False
    for number, epoch in enumerate(epochs, 1):
        wall = float(epoch.get("wall_time") or 0.0)
        validation = float(epoch.get("validation_time") or 0.0)
        epoch_end = t + max(0.0, wall - validation)
        meta = {"epoch_num": number}
        events.append(_Event("start", "epoch_start", t, None, meta))
        events.append(_Event("end", "epoch_stop", epoch_end, None, meta))
        t += wall
        accuracy = epoch.get("test_accuracy")
        if accuracy is not None:
            events.append(_Event("start", "eval_start", epoch_end, None, meta))
            events.append(_Event("event", "eval_accuracy", t, accuracy, meta))
            events.append(_Event("end", "eval_stop", t, None, meta))
            if goal is not None and accuracy >= goal:
                reached = True
                break
    if goal is not None:
        status = "success" if reached else "aborted"
    else:
        stopped = ((record.get("result") or {}).get("details") or {}).get("stopped_reason")
        status = "success" if not stopped else "aborted"
    events.append(_Event("end", "run_stop", t, None, {"status": status}))
    return events


def _write_with_mllog(events: list[_Event], stream) -> None:
    require("mlperf_logging", "mlperf", "Writing MLPerf logs (mllog)")
    from mlperf_logging.mllog.mllog import MLLogger
    logger = logging.Logger(f"deep500.mlperf.{id(stream)}", logging.INFO)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    mllogger = MLLogger(logger=logger, default_namespace="",
                              root_dir=os.path.dirname(os.path.dirname(__file__)))
    for event in events:
        getattr(mllogger, event.kind)(key=event.key, value=event.value,
                                      metadata=event.metadata or None,
                                      time_ms=int(round(event.time_s * 1000)))
    handler.flush()


def mlperf_lines(record: dict, manifest: dict) -> list[str]:
    """The ``:::MLLOG`` lines of one training record, as mllog writes them."""
    events = mlperf_events(record, manifest)
    if not events:
        return []
    stream = io.StringIO()
    _write_with_mllog(events, stream)
    return [line for line in stream.getvalue().splitlines() if line.startswith(PREFIX)]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_")[:80] or "run"


def write_mlperf_logs(output_dir: str, check: bool = True) -> list[str]:
    """Write the MLPerf log of every training configuration of the run folder (rank 0's
    records) into ``output_dir/mlperf/`` and return their paths; with ``check``, say on
    standard error what MLCommons' compliance checker finds in each."""
    manifest = read_manifest(output_dir)
    paths = []
    for record in read_results(output_dir):
        if record.get("rank", 0) != 0:
            continue
        lines = mlperf_lines(record, manifest)
        if not lines:
            continue
        folder = prepare_folder(os.path.join(output_dir, FOLDER), "the MLPerf logs")
        path = os.path.join(folder, f"{record.get('index', 0):04d}-"
                                    f"{_slug(record.get('label') or 'run')}.log")
        paths.append(write_atomically(path, "\n".join(lines) + "\n"))
        if check:
            from deep500.store.mlperf_compliance import check_mlperf_log
            sys.stderr.write(f"{os.path.basename(path)}: "
                             f"{check_mlperf_log(path).summary()}\n")
    if not paths:
        sys.stderr.write(f"deep500: no training records in {output_dir}: no MLPerf log "
                         f"written (only training experiments have epochs to log)\n")
    return paths
