"""The regression gate of ``deep500 compare A B --fail-above T`` and ``deep500 run
--baseline RUN --fail-above T``: which compared configurations it can judge, and the
exit status a CI reads.

A gate must not pass by accident. Two runs with no configuration in common compare
nothing, so that is an error (exit status 2), not a pass. A configuration is *not
judged* when

* either side was measured under interference (the telemetry sampler's
  ``telemetry.interfered``, :class:`deep500.utils.telemetry.InterferenceRule`): other
  processes used the CPU, so a difference may be theirs (asv refuses to compare on a
  busy machine for the same reason); or
* there are too few positive samples for a confidence interval at the chosen level
  (the significance test of :mod:`deep500.store.compare` cannot be made).

Exit statuses (:func:`gate_status`):

* ``0`` (:data:`PASSED`) every configuration in both runs judged, none significantly
  slower by more than T; without ``--fail-above``, compared;
* ``1`` (:data:`SLOWER`) a judged configuration is significantly slower by more than T;
* ``2`` (:data:`NOTHING_IN_COMMON`, raised as a StoreError) no configuration measured
  in both runs;
* ``3`` (:data:`NOT_JUDGED`) none judged slower, but some configuration could not be
  judged (the summary says which and why).
"""
from __future__ import annotations

from deep500.store.database import StoreError

PASSED, SLOWER, NOTHING_IN_COMMON, NOT_JUDGED = 0, 1, 2, 3

# Labels listed per side in the message of two runs with nothing in common.
_LISTED = 6


def not_judged_reason(verdict: str, interfered_sides: list) -> str | None:
    """Why a compared configuration cannot be judged by the gate, or None."""
    if interfered_sides:
        return f"measured under interference in {' and '.join(interfered_sides)}"
    if verdict == "too few samples":
        return "too few samples for a confidence interval"
    return None


def check_common(comparison) -> None:
    """Raise StoreError (exit status 2) when ``comparison`` compared no configuration,
    saying what each run holds and what to do."""
    if comparison.rows:
        return
    sides = []
    for name, run, labels in (("A", comparison.a, comparison.only_a),
                              ("B", comparison.b, comparison.only_b)):
        info = run.describe()
        listed = "; ".join(labels[:_LISTED]) + ("; ..." if len(labels) > _LISTED else "")
        holds = (f"{len(labels)} measured configuration{'s' if len(labels) != 1 else ''}"
                 f" ({listed})" if labels else "no measured configuration")
        sides.append(f"{name} ({info['name']}, recipe {info['recipe']!r}) holds {holds}")
    raise StoreError(
        f"no configuration was measured in both runs, so nothing was compared: "
        f"{'; '.join(sides)}. Compare two runs of the same recipe ('deep500 runs' lists "
        f"each run's recipe); configurations match when every setting (threads "
        f"included) and the rank are equal")


def gate_status(comparison) -> int:
    """The exit status of ``comparison`` (module docstring); StoreError when it compared
    nothing."""
    check_common(comparison)
    if comparison.fail_above is None:
        return PASSED
    if any(row["fails"] for row in comparison.rows):
        return SLOWER
    if any(row["not_judged"] for row in comparison.rows):
        return NOT_JUDGED
    return PASSED


def gate_summary(comparison) -> list[str]:
    """The gate's lines under the table: judged, slower, not judged (and why), and the
    exit status when it is not 0."""
    if comparison.fail_above is None:
        return []
    rows = comparison.rows
    unjudged = [row for row in rows if row["not_judged"]]
    failing = sum(row["fails"] for row in rows)
    lines = [f"{len(rows) - len(unjudged)} of {len(rows)} judged: {failing} significantly "
             f"slower by more than {comparison.fail_above:.0%}"]
    if unjudged:
        reasons = {}
        for row in unjudged:
            reasons.setdefault(row["not_judged"], []).append(row["label"])
        lines.append(f"{len(unjudged)} not judged: " + "; ".join(
            f"{why} ({', '.join(labels)})" for why, labels in reasons.items()))
    status = gate_status(comparison)
    if status == SLOWER:
        lines.append("exit status 1: significantly slower")
    elif status == NOT_JUDGED:
        lines.append("exit status 3: some configurations were not judged (re-measure on "
                     "a quiet machine: deep500 run --remeasure-interfered)")
    return lines
