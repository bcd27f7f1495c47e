"""``deep500 conformance``: run the suite on the chosen executors, write the results
(JSON), the table (Markdown) and the locked passing set, print a summary."""
from __future__ import annotations

import sys
from typing import Iterable

from deep500.conformance.cases import load_cases
from deep500.conformance.locked import update_locked
from deep500.conformance.results import STATUSES
from deep500.conformance.run import DEFAULT_TIME_LIMIT, EXECUTORS, executor_factories, \
    run_conformance
from deep500.utils.errors import Deep500Error


def conformance_command(executors: Iterable[str] = EXECUTORS, out: str | None = None,
                        json_path: str | None = None, results_path: str | None = None,
                        pattern: str | None = None, time_limit: float = DEFAULT_TIME_LIMIT,
                        replace: bool = False, progress: bool = True, command: str = ""
                        ) -> int:
    """``deep500 conformance``: run, write the outputs, print a summary. Exit status 0,
    or 1 when a locked case no longer passes."""
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
    for executor in results.executors:
        counts = results.counts(executor)
        total = sum(counts.values())
        print(f"{executor:<12} " + "  ".join(f"{s} {counts[s]:>4}" for s in STATUSES)
              + f"  ({100.0 * counts['pass'] / total:.1f}% of {total})")
    if results_path:
        results.write_json(results_path)
        print(f"Results:  {results_path}")
    if out:
        results.write_markdown(out)
        print(f"Table:    {out}")
    regressions = {}
    if json_path:
        regressions = update_locked(json_path, results, replace=replace)
        print(f"Passing:  {json_path}")
    for executor, names in regressions.items():
        print(f"deep500 conformance: {executor} no longer passes {len(names)} locked cases: "
              f"{', '.join(names[:20])}{' ...' if len(names) > 20 else ''}", file=sys.stderr)
    return 1 if regressions else 0
