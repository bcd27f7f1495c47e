"""``deep500 bisect RECIPE --good A --bad B --config FILTER``: the commit where a
configuration got slower, as ``asv find`` and ``git bisect`` find it.

The recipe runs at A and at B (:mod:`deep500.store.revision_runs`, the same runner as
``deep500 history --run``); B must be slower than A by more than ``--threshold``
(default 10%) on the chosen configuration's metric, else there is nothing to find.
Then a binary search over the commits between them (``git rev-list --first-parent
A..B``, oldest first): a commit is *slow* when its value lies above the geometric mean
of A's and B's, i.e. nearer B's level than A's on a log scale (a step in time, as
``asv find`` looks for the largest step), and the search narrows to the half where the
step must be, running ⌈log₂ n⌉ commits of n. The answer is the first slow commit: its
parent is fast.

A value comes from the configuration's run at that revision. A revision that the
database already holds a run of, for this configuration, is not run again (the latest
run measured without interference, else the latest; ``--rerun`` runs every revision
anyway). A run measured under interference is reported as such: a search on disturbed
numbers may go wrong, and the output says which steps stood on such runs.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

from deep500.store.database import StoreError
from deep500.store.history import grouped_rows, parse_filter, parse_metric, series_points
from deep500.store.revision_runs import (Revision, RevisionRunner, _git, describe,
                                         repository_of, revision)

# Exit statuses: found; B is not slower than A by the threshold.
FOUND, NOT_SLOWER = 0, 1


@dataclass
class Measured:
    revision: Revision
    value: float
    interference: str | None
    reused: bool


class Bisection:
    """The state of one search: the runner, the configuration and what was measured."""

    def __init__(self, runner: RevisionRunner, config_filter: str, metric: str,
                 rerun: bool, out):
        self.runner = runner
        self.filter, self.terms = config_filter, parse_filter(config_filter)
        self.metric = metric
        self.metric_name, self.field = parse_metric(metric)
        self.rerun = rerun
        self.out = out

    def _stored(self, sha: str) -> dict | None:
        """The configuration's latest point at ``sha`` in the database (the latest
        measured without interference, if any), or None."""
        by_key = grouped_rows(self.runner.database, terms=self.terms)
        self._check_one(by_key)
        for group in by_key.values():
            points, _ = series_points(group, self.metric_name, self.field)
            stored = [p for p in points if p["revision"] == sha and p["value"] is not None]
            clean = [p for p in stored if not p["interference"]]
            if clean or stored:
                return (clean or stored)[-1]
        return None

    def _check_one(self, by_key: dict) -> None:
        if len(by_key) > 1:
            labels = "; ".join(group[-1]["label"] or key for key, group in by_key.items())
            raise StoreError(f"--config {self.filter!r} matches {len(by_key)} "
                             f"configurations ({labels}); add terms to choose one")

    def measure(self, item: Revision) -> Measured:
        if not self.rerun and os.path.exists(self.runner.database):
            stored = self._stored(item.sha)
            if stored is not None:
                mark = f" ⚠ interference: {stored['interference']}" \
                    if stored["interference"] else ""
                self.out.write(f"  {item.short}: {stored['value']:.6g} (run "
                               f"{stored['run_id']}, already stored){mark}\n")
                return Measured(item, stored["value"], stored["interference"], True)
        self.out.write(f"  {item.short} {item.subject[:50]}: running ...\n")
        self.out.flush()
        run = self.runner.run(item)
        if run.status not in (0, 1):
            raise StoreError(f"bisect: the recipe could not be measured at "
                             f"{describe(run)}\n{run.output[-2000:]}")
        by_key = grouped_rows(self.runner.database, terms=self.terms)
        self._check_one(by_key)
        for group in by_key.values():
            points, _ = series_points(group, self.metric_name, self.field)
            mine = [p for p in points if p["folder"] == os.path.realpath(run.folder)]
            if mine and mine[-1]["value"] is not None:
                point = mine[-1]
                mark = f" ⚠ interference: {point['interference']}" \
                    if point["interference"] else ""
                self.out.write(f"  {item.short}: {point['value']:.6g}{mark}\n")
                return Measured(item, point["value"], point["interference"], False)
        raise StoreError(f"bisect: the run at {item.short} ({run.folder}) measured no "
                         f"configuration matching --config {self.filter!r} with "
                         f"{self.metric}")


def bisect_command(recipe: str, good: str, bad: str, config_filter: str, database: str,
                   metric: str = "WallclockTime.median", threshold: float = 0.10,
                   rerun: bool = False, results: str | None = None, out=None) -> int:
    """``deep500 bisect`` (module docstring); returns the exit status."""
    out = out or sys.stdout
    root, _ = repository_of(recipe)
    first, last = revision(root, good), revision(root, bad)
    between = [revision(root, sha) for sha in _git(
        ["rev-list", "--reverse", "--first-parent", f"{first.sha}..{last.sha}", "--"],
        root, f"commits between {good} and {bad}").split()]
    if not between or between[-1].sha != last.sha:
        raise StoreError(f"bisect: {bad} ({last.short}) does not descend from {good} "
                         f"({first.short}) along first parents; give --good an ancestor "
                         f"of --bad")
    with RevisionRunner(recipe, database, results, out=out) as runner:
        search = Bisection(runner, config_filter, metric, rerun, out)
        out.write(f"good {first.short}, bad {last.short}, {len(between) - 1} commit(s) "
                  f"between\n")
        fast, slow = search.measure(first), search.measure(last)
        if not slow.value > fast.value * (1.0 + threshold):
            out.write(f"{last.short} ({slow.value:.6g}) is not slower than {first.short} "
                      f"({fast.value:.6g}) by more than {threshold:.0%}: nothing to "
                      f"bisect\n")
            return NOT_SLOWER
        cut = math.sqrt(fast.value * slow.value)
        low, high = -1, len(between) - 1  # between[low] fast (-1: good), between[high] slow
        measured = {-1: fast, high: slow}
        while high - low > 1:
            middle = (low + high) // 2
            measured[middle] = search.measure(between[middle])
            if measured[middle].value > cut:
                high = middle
            else:
                low = middle
    culprit, parent = measured[high], measured[low]
    out.write(f"first slow commit: {culprit.revision.sha} {culprit.revision.subject}\n"
              f"  {metric}: {parent.value:.6g} at {parent.revision.short} → "
              f"{culprit.value:.6g} (×{culprit.value / parent.value:.3g}); the boundary "
              f"was {cut:.6g}, the geometric mean of good and bad\n")
    disturbed = [m.revision.short for m in measured.values() if m.interference]
    if disturbed:
        out.write(f"⚠ measured under interference: {', '.join(disturbed)}; re-run on a "
                  f"quiet machine (--rerun) before trusting the answer\n")
    return FOUND
