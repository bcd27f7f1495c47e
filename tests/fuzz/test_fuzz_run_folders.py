"""Run-folder fuzzer: seeded mutations of a small run folder (records shaped as the
operator experiment writes them, and its manifest), each passed to ``deep500 runs
--add``, ``deep500 compare`` (the folder against itself) and, for a few, ``deep500
report``. Exit 0 or 1 is fine; an error must be exit 2 with a message. An exception
escaping ``main`` (``AttributeError``, ``TypeError``, ``sqlite3.ProgrammingError``, ...)
fails the test with the case's number and mutation, so it is reproduced from the seed.

Mutations change one node of one record or of the manifest: another type in its place
(None, a number, a string, a list, a dict, a bool, huge and non-finite numbers), a
deleted key, a nested value made deep; or cut a line of ``results.jsonl`` short.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import random
import traceback

import pytest

from deep500.cli import main

SEED = 29
CASES = 100
REPORTED = 4  # cases also given to 'deep500 report' (matplotlib: about a second each)

JUNK = [None, 0, -1, 1.5, 2 ** 70, 1e308, math.inf, math.nan, "", "abc", [], [1, "x"],
        {}, {"a": {"b": [None]}}, True]


def _record(index: int, seed: int, op: str) -> dict:
    samples = [1e-5 * (1 + 0.01 * k + 0.1 * seed) for k in range(8)]
    return {
        "kind": "measurement", "level": 0, "experiment": "operators", "index": index,
        "rank": 0, "size": 1, "session": 0, "label": f"{op} | reference | seed={seed}",
        "configuration": {"framework": "reference", "dtype": "float32", "seed": seed,
                          "operator": {"op_type": op, "input_shapes": [[4, 5]],
                                       "attributes": {}, "label": f"{op} 4x5"}},
        "telemetry": {"interfered": False, "other_cpu_cores": 0.1, "reason": ""},
        "remeasured": 0, "acceptance": [{"threshold": "L2Error.relative <= 1e-4",
                                         "value": 0.0, "passed": True}],
        "passed": True,
        "result": {"test": "forward", "passed": None, "details": {}, "metrics": [
            {"metric": "WallclockTime", "primary": "median", "unit": "s",
             "summary": {"n": 8, "median": samples[4], "ci_low": samples[1],
                         "ci_high": samples[6], "ci_relative_width": 0.5, "warmup": 2},
             "samples": samples, "warnings": []},
            {"metric": "FLOPs", "primary": "gflops_per_s", "unit": "GFLOP/s",
             "summary": {"flops": 20, "gflops_per_s": 20 / samples[4] / 1e9},
             "samples": [], "warnings": []},
            {"metric": "L2Error", "primary": "relative", "unit": "",
             "summary": {"relative": 0.0}, "samples": [], "warnings": []}]}}


def _folder_content() -> tuple[list[dict], dict]:
    records = [_record(2 * n + s, s, op) for n, op in enumerate(("Relu", "Gemm"))
               for s in (0, 1)]
    manifest = {"recipe": {"name": "fuzz", "path": "fuzz.yaml", "experiment": "operators",
                           "content": {"mutable": {"seed": [0, 1]}}},
                "started": "2026-11-28T20:00:00+00:00", "status": "complete",
                "configurations": 4, "mpi_ranks": 1,
                "hardware": {"hostname": "h", "cpu_model": "c"},
                "git_revision": {"deep500": "abc", "working_directory": "abc"},
                "versions": {"python": "3.11"}, "threads": {}, "session": 0}
    return records, manifest


def _paths(value, prefix=()):
    """Every path (a tuple of keys and indices) to a node of ``value``."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


def _set(root, path, value):
    for key in path[:-1]:
        root = root[key]
    if value is _DELETE:
        del root[path[-1]]
    else:
        root[path[-1]] = value


_DELETE = object()


def _mutate(rng: random.Random, records: list[dict], manifest: dict) -> str:
    """Change one node; return what was done."""
    if rng.random() < 0.08:
        return "cut"
    target = manifest if rng.random() < 0.3 else rng.choice(records)
    name = "manifest" if target is manifest else f"record {records.index(target)}"
    path = rng.choice([p for p in _paths(target) if p])
    roll = rng.random()
    if roll < 0.15:
        _set(target, path, _DELETE)
        return f"{name}: deleted {path}"
    if roll < 0.25:
        deep = "x"
        for _ in range(rng.choice((50, 400))):
            deep = [deep]
        _set(target, path, deep)
        return f"{name}: {path} nested deep"
    value = copy.deepcopy(rng.choice(JUNK))
    _set(target, path, value)
    return f"{name}: {path} = {value!r}"


def _write(folder, records, manifest, cut: bool) -> None:
    folder.mkdir()
    lines = [json.dumps(r, allow_nan=True) for r in records]
    if cut:
        middle = len(lines) // 2
        lines[middle] = lines[middle][:len(lines[middle]) // 2]
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "manifest.json").write_text(json.dumps(manifest, allow_nan=True))


def _call(argv: list[str]) -> tuple[int | None, str]:
    """(exit status, None when an exception escaped; what went to stderr or the
    traceback)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            status = main(argv)
    except SystemExit as exc:  # argparse
        return (exc.code if isinstance(exc.code, int) else 2), err.getvalue()
    except RecursionError:
        return None, traceback.format_exc(limit=3)
    except Exception:  # noqa: BLE001 - any escape is what the fuzzer looks for
        return None, traceback.format_exc()
    return status, err.getvalue()


def test_malformed_run_folders_give_messages_not_tracebacks(tmp_path):
    rng = random.Random(SEED)
    failures = []
    database = str(tmp_path / "fuzz.db")
    for case in range(CASES):
        records, manifest = _folder_content()
        what = _mutate(rng, records, manifest)
        folder = tmp_path / f"case{case}"
        _write(folder, records, manifest, cut=what == "cut")
        commands = [["runs", "--add", str(folder), "--db", database],
                    ["compare", str(folder), str(folder), "--db", database]]
        if case < REPORTED:
            commands.append(["report", str(folder), "--figure-format", "none"])
        for argv in commands:
            status, text = _call(argv)
            if status is None or status not in (0, 1, 2):
                failures.append(f"case {case} ({what}), deep500 {argv[0]}: {text}")
            elif status == 2 and "deep500: error:" not in text:
                failures.append(f"case {case} ({what}), deep500 {argv[0]}: exit 2 "
                                f"without a message: {text!r}")
    assert not failures, f"{len(failures)} raw failures:\n" + "\n".join(failures[:8])
