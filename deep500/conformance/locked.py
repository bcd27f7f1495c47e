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


def update_locked(path: str, results: ConformanceResults, replace: bool = False
                  ) -> dict[str, list[str]]:
    """Add this run's passing cases to the locked set in ``path``; returns the
    regressions: ``{executor: [locked cases this run ran and did not pass]}``.

    Locked cases stay locked unless ``replace``, which makes the run's outcome the new
    truth for the cases it ran (cases it did not run keep their state).
    """
    locked = read_locked(path)
    regressions = locked_regressions(locked, results)
    for executor in results.executors:
        ran = {r.case for r in results.of(executor)}
        passing = {r.case for r in results.of(executor) if r.status == "pass"}
        previous = set(locked.get(executor, []))
        keep = previous - ran if replace else previous
        locked[executor] = sorted(keep | passing)
    write_text(path, json.dumps(dict(sorted(locked.items())), indent=1) + "\n")
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
