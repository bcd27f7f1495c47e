"""The locked passing set (``tests/lv1_network/conformance_passing.json``): cases that
passed once on an executor must keep passing; a run adds its passing cases to it."""
from __future__ import annotations

import json
import os

from deep500.conformance.results import ConformanceResults, write_text


def read_locked(path: str) -> dict[str, list[str]]:
    """``{executor: [case names that must pass]}``; empty when the file does not exist."""
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as stream:
        return json.load(stream)


def merged_locked(locked: dict[str, list[str]], results: ConformanceResults,
                  replace: bool = False) -> tuple[dict, dict]:
    """(the locked set ``locked`` with this run's passing cases added, the
    regressions: ``{executor: [locked cases this run ran and did not pass]}``).

    Locked cases stay locked unless ``replace``, which makes the run's outcome the new
    truth for the cases it ran (cases it did not run keep their state).
    """
    merged = dict(locked)
    for executor in results.executors:
        ran = {r.case for r in results.of(executor)}
        passing = {r.case for r in results.of(executor) if r.status == "pass"}
        previous = set(locked.get(executor, []))
        keep = previous - ran if replace else previous
        merged[executor] = sorted(keep | passing)
    return dict(sorted(merged.items())), locked_regressions(locked, results)


def write_locked(path: str, locked: dict[str, list[str]]) -> None:
    write_text(path, json.dumps(locked, indent=1) + "\n")


def update_locked(path: str, results: ConformanceResults, replace: bool = False
                  ) -> dict[str, list[str]]:
    """Add this run's passing cases to the locked set in ``path`` (see
    :func:`merged_locked`); returns the regressions."""
    locked, regressions = merged_locked(read_locked(path), results, replace)
    write_locked(path, locked)
    return regressions


def locked_regressions(locked: dict[str, list[str]], results: ConformanceResults
                       ) -> dict[str, list[str]]:
    """``{executor: [locked cases this run ran and did not pass]}``, executors with none
    left out."""
    regressions = {}
    for executor in results.executors:
        failed = {r.case for r in results.of(executor) if r.status != "pass"}
        lost = sorted(set(locked.get(executor, [])) & failed)
        if lost:
            regressions[executor] = lost
    return regressions
