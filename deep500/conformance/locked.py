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
    regressions = {}
    for executor in results.executors:
        ran = {r.case: r.status for r in results.of(executor)}
        previous = set(locked.get(executor, []))
        passing = {case for case, status in ran.items() if status == "pass"}
        regressions[executor] = sorted(c for c in previous if c in ran and c not in passing)
        keep = previous - set(ran) if replace else previous
        locked[executor] = sorted(keep | passing)
    write_text(path, json.dumps(dict(sorted(locked.items())), indent=1) + "\n")
    return {e: cases for e, cases in regressions.items() if cases}
