"""Training runs as MLPerf-style logs: ``deep500 report DIR --mlperf`` writes, for each
training configuration of the run folder DIR (Level 2 and Level 3 records with
per-epoch statistics; rank 0's for Level 3), ``DIR/mlperf/<index>-<label>.log``: one
run per file, as MLPerf training's ``result_N.txt``.

Each line is ``:::MLLOG `` followed by one JSON object ``{"namespace", "time_ms",
"event_type", "key", "value", "metadata"}``, with the event types (``POINT_IN_TIME``,
``INTERVAL_START``, ``INTERVAL_END``) and keys (``run_start``, ``epoch_start``,
``eval_accuracy``, ``run_stop``, ``global_batch_size``, ``opt_name``, ...) of MLCommons'
``mlperf_logging.mllog`` (``mllog/constants.py``). Per epoch: ``epoch_start``,
``epoch_stop`` (after its training steps), ``eval_start``, ``eval_accuracy`` (test
accuracy), ``eval_stop``; ``epoch_num`` counts from 1.

The log is written after the run, from the records in ``results.jsonl``: durations
are the measured ones (each epoch's data + step time, then its validation time), and
``time_ms`` starts at the configuration's measured start (its telemetry start, else
the manifest's start), so absolute times are approximate where durations are exact.
As in MLPerf, the run stops when the recipe's ``TimeToAccuracy`` target is first
reached (``run_stop`` with ``status: success``; later epochs are not logged) and is
``aborted`` when it never is; without a target, a run that trained every epoch is a
``success``.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import sys

from deep500.results.files import read_manifest, read_results
from deep500.results.safe_write import prepare_folder, write_atomically

PREFIX = ":::MLLOG "
FOLDER = "mlperf"


def _line(time_s: float, event_type: str, key: str, value=None, metadata=None) -> str:
    return PREFIX + json.dumps({"namespace": "", "time_ms": int(round(time_s * 1000)),
                                "event_type": event_type, "key": key, "value": value,
                                "metadata": metadata or {}}, default=str)


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


def mlperf_lines(record: dict, manifest: dict) -> list[str]:
    """The MLPerf-style log lines of one training record (module docstring); [] when
    the record has no per-epoch statistics."""
    epochs = _epochs(record)
    if record.get("kind") != "measurement" or not epochs:
        return []
    configuration = record.get("configuration") or {}
    conditions = ((record.get("result") or {}).get("details") or {}).get(
        "statistics", {}).get("conditions") or {}
    optimizer = configuration.get("optimizer") or {}
    network = configuration.get("network") or {}
    target = _metric(record, "TimeToAccuracy")
    goal = (target or {}).get("summary", {}).get("target")
    t = _start_time(record, manifest)
    lines = [
        _line(t, "POINT_IN_TIME", "submission_benchmark",
              network.get("label") if isinstance(network, dict) else str(network)),
        _line(t, "POINT_IN_TIME", "submission_platform",
              (manifest.get("hardware") or {}).get("cpu_model")),
        _line(t, "POINT_IN_TIME", "global_batch_size",
              (configuration.get("batch_size") or 0) * (record.get("size") or 1)),
        _line(t, "POINT_IN_TIME", "opt_name", optimizer.get("type")),
        _line(t, "POINT_IN_TIME", "opt_base_learning_rate", optimizer.get("learning_rate")),
        _line(t, "POINT_IN_TIME", "seed", configuration.get("seed")),
        _line(t, "POINT_IN_TIME", "train_samples", conditions.get("train_samples")),
        _line(t, "POINT_IN_TIME", "eval_samples", conditions.get("validation_samples")),
        _line(t, "INTERVAL_START", "run_start", None,
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
        lines.append(_line(t, "INTERVAL_START", "epoch_start", None, meta))
        lines.append(_line(epoch_end, "INTERVAL_END", "epoch_stop", None, meta))
        t += wall
        accuracy = epoch.get("test_accuracy")
        if accuracy is not None:
            lines.append(_line(epoch_end, "INTERVAL_START", "eval_start", None, meta))
            lines.append(_line(t, "POINT_IN_TIME", "eval_accuracy", accuracy, meta))
            lines.append(_line(t, "INTERVAL_END", "eval_stop", None, meta))
            if goal is not None and accuracy >= goal:
                reached = True
                break
    if goal is not None:
        status = "success" if reached else "aborted"
    else:
        stopped = ((record.get("result") or {}).get("details") or {}).get("stopped_reason")
        status = "success" if not stopped else "aborted"
    lines.append(_line(t, "INTERVAL_END", "run_stop", None, {"status": status}))
    return lines


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_")[:80] or "run"


def write_mlperf_logs(output_dir: str) -> list[str]:
    """Write the MLPerf-style log of every training configuration of the run folder
    (rank 0's records) into ``output_dir/mlperf/`` and return their paths."""
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
    if not paths:
        sys.stderr.write(f"deep500: no training records in {output_dir}: no MLPerf log "
                         f"written (only training experiments have epochs to log)\n")
    return paths
