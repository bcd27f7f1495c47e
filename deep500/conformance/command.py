"""``deep500 conformance``: run the suite on the chosen executors, write the results
(JSON), the pages (Markdown) and the locked passing set, print a summary.

A full run writes where the repository keeps them (``docs/conformance.md`` and its
per-case matrix, ``tests/lv1_network/conformance_passing.json``). A partial run
(``--pattern``) writes its results and pages under ``results/`` and only checks the
locked set, unless ``--out`` or ``--json`` name where to write: a few cases must not
replace the tables of all of them.
"""
from __future__ import annotations

import sys
from typing import Iterable

from deep500.conformance.cases import load_cases
from deep500.conformance.locked import locked_regressions, read_locked, update_locked
from deep500.conformance.markdown import write_pages
from deep500.conformance.results import STATUSES, ConformanceResults
from deep500.conformance.run import DEFAULT_TIME_LIMIT, EXECUTORS, executor_factories, \
    run_conformance
from deep500.utils.errors import Deep500Error

DEFAULT_OUT = "docs/conformance.md"
DEFAULT_JSON = "tests/lv1_network/conformance_passing.json"
DEFAULT_RESULTS = "results/conformance.json"
PARTIAL_OUT = "results/conformance_partial.md"
PARTIAL_RESULTS = "results/conformance_partial.json"


def conformance_command(executors: Iterable[str] = EXECUTORS, out: str | None = None,
                        json_path: str | None = None, results_path: str | None = None,
                        pattern: str | None = None, time_limit: float = DEFAULT_TIME_LIMIT,
                        replace: bool = False, progress: bool = True, command: str = ""
                        ) -> int:
    """``deep500 conformance``: run, write the outputs, print a summary. Exit status 0,
    or 1 when a locked case no longer passes. ``out``, ``json_path`` and
    ``results_path`` left None take the defaults of a full run, or of a partial one
    (``pattern``), which updates no locked set."""
    factories, skipped = executor_factories(executors)
    for name, why in skipped.items():
        print(f"deep500 conformance: skipping {name}: {why}", file=sys.stderr)
    if not factories:
        raise Deep500Error(f"None of the executors {list(executors)} can be imported; "
                           f"nothing to run")
    cases = load_cases(pattern)
    if not cases:
        raise Deep500Error(f"No ONNX node test case matches the pattern {pattern!r}")
    results = run_conformance(cases, factories, time_limit=time_limit, progress=progress,
                              skipped=skipped, command=command)
    _print_summary(results)
    partial = bool(pattern)
    results_path = results_path or (PARTIAL_RESULTS if partial else DEFAULT_RESULTS)
    results.write_json(results_path)
    print(f"Results:  {results_path}")
    out = out or (PARTIAL_OUT if partial else DEFAULT_OUT)
    matrix = write_pages(results, out)
    print(f"Tables:   {out}, {matrix}")
    if json_path or not partial:
        json_path = json_path or DEFAULT_JSON
        regressions = update_locked(json_path, results, replace=replace)
        print(f"Passing:  {json_path}")
    else:
        regressions = locked_regressions(read_locked(DEFAULT_JSON), results)
        print(f"Passing:  {DEFAULT_JSON} checked, not updated (a partial run; --json "
              f"PATH writes one)")
    for executor, names in regressions.items():
        print(f"deep500 conformance: {executor} no longer passes {len(names)} locked cases: "
              f"{', '.join(names[:20])}{' ...' if len(names) > 20 else ''}", file=sys.stderr)
    return 1 if regressions else 0


def _print_summary(results: ConformanceResults) -> None:
    """Per executor: the statuses, the pass share, and the failure classes."""
    for executor in results.executors:
        counts = results.counts(executor)
        total = sum(counts.values())
        print(f"{executor:<12} " + "  ".join(f"{s} {counts[s]:>4}" for s in STATUSES)
              + f"  ({100.0 * counts['pass'] / total:.1f}% of {total})")
        classes = {c: n for c, n in results.class_counts(executor).items() if n}
        if classes:
            print(f"{'':<12} not passing: "
                  + ", ".join(f"{c} {n}" for c, n in classes.items()))
