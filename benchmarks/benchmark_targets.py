"""What the benchmarks in ``benchmarks/`` share: their targets, judged MET or NOT MET
(or UNRESOLVED where a confidence interval straddles the target), ``--check``, and the
run time they expect, printed before they measure.

A benchmark prints its verdicts as it always did; each verdict also goes through
:data:`TARGETS`, so that ``--check`` can end the script with exit status 1 when any
target was NOT MET (a CI job then fails instead of reading "NOT MET" and exiting 0, as
``pytest-benchmark --benchmark-compare-fail`` and ``asv continuous`` fail theirs). An
UNRESOLVED target is not a failure: the machine was too noisy to tell; the summary line
says how many there were.

    from benchmark_targets import TARGETS, add_check_option, expected_run_time
    add_check_option(parser)
    expected_run_time(12 * 20.0, "12 comparisons of up to 20 s of timed rounds")
    verdict = TARGETS.judge("lv3_models median error", median <= 0.15)
    ...
    return TARGETS.exit_status(args.check)
"""
from __future__ import annotations

import sys

MET, NOT_MET, UNRESOLVED = "MET", "NOT MET", "UNRESOLVED"


class Targets:
    """The verdicts of one benchmark process, in the order they were judged."""

    def __init__(self):
        self.verdicts: list[tuple[str, str]] = []

    def judge(self, name: str, met: bool | None) -> str:
        """Record target ``name`` as MET (True) or NOT MET (False) and return the word;
        None (not judged, e.g. a row without a target) returns '-' and records nothing."""
        if met is None:
            return "-"
        return self.record(name, MET if met else NOT_MET)

    def record(self, name: str, verdict: str) -> str:
        """Record a verdict already in words (MET, NOT MET or UNRESOLVED); returns it."""
        if verdict not in (MET, NOT_MET, UNRESOLVED):
            raise ValueError(f"verdict of {name!r}: {verdict!r} is not one of "
                             f"{MET!r}, {NOT_MET!r}, {UNRESOLVED!r}")
        self.verdicts.append((name, verdict))
        return verdict

    def named(self, verdict: str) -> list[str]:
        return [name for name, said in self.verdicts if said == verdict]

    def exit_status(self, check: bool, status: int = 0, out=None) -> int:
        """The script's exit status: ``status`` when it is an error already; with
        ``check``, 1 when any target was NOT MET (the line says which, on stderr, so
        that a benchmark's named last line stays the last line of its output); else 0."""
        out = out or sys.stderr
        if status:
            return status
        if not check:
            return 0
        missed, unresolved = self.named(NOT_MET), self.named(UNRESOLVED)
        print(f"--check: {len(self.verdicts)} targets judged, {len(missed)} NOT MET"
              + (f", {len(unresolved)} UNRESOLVED" if unresolved else "")
              + (f": {'; '.join(missed)}" if missed else ""), file=out, flush=True)
        return 1 if missed else 0


TARGETS = Targets()


def add_check_option(parser) -> None:
    parser.add_argument("--check", action="store_true", help="exit status 1 when any "
                        "target is NOT MET (default: 0 whatever the verdicts; an "
                        "UNRESOLVED target is no failure)")


def format_duration(seconds: float) -> str:
    """``45 s``, ``3.5 min``, ``1.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def expected_run_time(seconds: float, basis: str, at_most: float | None = None,
                      out=None) -> None:
    """Print, before anything is measured, how long the run should take (and at most,
    where the script bounds it) and what the figure counts."""
    bound = f", at most {format_duration(at_most)}" if at_most is not None else ""
    print(f"Expected run time: about {format_duration(seconds)}{bound} ({basis})",
          file=out or sys.stdout, flush=True)
