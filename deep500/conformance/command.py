"""``deep500 conformance``: run the suite on the chosen executors, write the results
(JSON), the pages (Markdown) and the locked passing set, print a summary.

Every run writes into one folder, ``--out`` (default ``results/conformance``):
``conformance.md`` and its per-case matrix ``conformance_cases.md``, every case's
outcome in ``conformance.json``, and ``conformance_passing.json``, the repository's
locked passing set with this run's passing cases added. The repository's locked set is
only read, to find locked cases that no longer pass. Files the repository tracks
(``docs/conformance.md``, ``docs/conformance_cases.md``,
``tests/lv1_network/conformance_passing.json``, found beside the ``deep500`` package,
wherever the command runs) are written only with ``update_docs``
(``--update-docs``), and only by a run of every case: a few cases must not replace the
tables of all of them.
"""
from __future__ import annotations

import os
import sys
from typing import Iterable

from deep500.conformance.cases import load_cases
from deep500.conformance.locked import merged_locked, read_locked, write_locked
from deep500.conformance.markdown import cases_path, write_pages
from deep500.conformance.results import STATUSES, ConformanceResults
from deep500.conformance.run import DEFAULT_TIME_LIMIT, EXECUTORS, executor_factories, \
    run_conformance
from deep500.utils.errors import Deep500Error

# Where the repository keeps the generated pages and the locked set, from its root.
TRACKED_PAGE = os.path.join("docs", "conformance.md")
TRACKED_LOCKED = os.path.join("tests", "lv1_network", "conformance_passing.json")
DEFAULT_FOLDER = os.path.join("results", "conformance")
PAGE, RESULTS, LOCKED = "conformance.md", "conformance.json", "conformance_passing.json"


def repository_root() -> str:
    """The checkout holding the ``deep500`` package that runs (its parent folder)."""
    import deep500
    return os.path.dirname(os.path.dirname(os.path.abspath(deep500.__file__)))


def _tracked(root: str) -> list[str]:
    page = os.path.join(root, TRACKED_PAGE)
    return [page, cases_path(page), os.path.join(root, TRACKED_LOCKED)]


def _check_out_folder(out: str, root: str) -> None:
    """Refuse an ``--out`` whose files would replace the repository's tracked ones."""
    if os.path.isfile(out):
        raise Deep500Error(f"--out {out}: a file; --out names a folder, where "
                           f"{PAGE}, its matrix, {RESULTS} and {LOCKED} are written")
    tracked = {os.path.realpath(p) for p in _tracked(root)}
    targets = [os.path.join(out, name) for name in (PAGE, cases_path(PAGE), LOCKED)]
    clash = [p for p in targets if os.path.realpath(p) in tracked]
    if clash:
        raise Deep500Error(f"--out {out}: {clash[0]} is a file the repository tracks; "
                           f"give another folder, or --update-docs (a run of every "
                           f"case) to regenerate the repository's pages")


def conformance_command(executors: Iterable[str] = EXECUTORS,
                        out: str = DEFAULT_FOLDER, pattern: str | None = None,
                        time_limit: float = DEFAULT_TIME_LIMIT, replace: bool = False,
                        update_docs: bool = False, progress: bool = True,
                        command: str = "", root: str | None = None) -> int:
    """``deep500 conformance``: run, write the outputs into the folder ``out``, print a
    summary (module docstring). ``update_docs`` also writes the repository's pages and
    locked set (``root``, default :func:`repository_root`), refused with ``pattern``.
    Exit status 0, or 1 when a locked case no longer passes (its cases stay locked
    unless ``replace``)."""
    root = root or repository_root()
    if update_docs and pattern:
        raise Deep500Error(f"--update-docs with --pattern {pattern!r}: a partial run must "
                           f"not replace the tables of every case; drop --pattern to "
                           f"regenerate {TRACKED_PAGE}, or --update-docs to write only "
                           f"into --out")
    _check_out_folder(out, root)
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
    results.write_json(os.path.join(out, RESULTS))
    print(f"Results:  {os.path.join(out, RESULTS)}")
    page = os.path.join(out, PAGE)
    print(f"Tables:   {page}, {write_pages(results, page)}")
    tracked_locked = os.path.join(root, TRACKED_LOCKED)
    locked, regressions = merged_locked(read_locked(tracked_locked), results, replace)
    write_locked(os.path.join(out, LOCKED), locked)
    print(f"Passing:  {os.path.join(out, LOCKED)} ({tracked_locked} with this run's "
          f"passing cases)")
    if update_docs:
        tracked_page = os.path.join(root, TRACKED_PAGE)
        print(f"Updated:  {tracked_page}, {write_pages(results, tracked_page)}")
        write_locked(tracked_locked, locked)
        print(f"Updated:  {tracked_locked}")
    for executor, names in regressions.items():
        print(f"deep500 conformance: {executor} no longer passes {len(names)} locked cases "
              f"of {tracked_locked}: {', '.join(names[:20])}"
              f"{' ...' if len(names) > 20 else ''}", file=sys.stderr)
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
