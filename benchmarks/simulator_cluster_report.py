"""The table and verdict of ``benchmarks/lv3_simulator.py --cluster`` from its rows (one
per configuration, each with its rounds' measured step and ``SimulatedStep``).

A configuration's figures are medians over rounds; its error is |r − 1| with r the
median over rounds of the round's predicted / measured. Over a set of configurations:
the median and the worst error, and Kendall's τ (τ-b, ``scipy.stats.kendalltau``)
between the predicted and the measured step times, i.e. how well the simulator orders
the configurations. Rows with more ranks than cores are oversubscribed: the ranks
share the cores, and the last line leaves them out when they distort (their median
error above the 5% target).

Two figures say how far the host lets a model be checked. **Repeatability**: how much
a configuration's measured step moves between rounds (|round / median over rounds − 1|,
its median and worst over configurations); a model cannot be judged more finely than
the measurement repeats. **Steal**: the share of the host's CPU time the hypervisor
gave to other guests while a round's runs measured (``/proc/stat``'s steal, through
psutil); a round above ``STEAL_LIMIT`` ran on a disturbed host, and where every
configuration keeps a round below it, the statistics and the last line are over those
rounds only (the project's rule: an interfered number is not a result), with the line
over all rounds printed before it.

**At the run's speed** (a diagnostic, printed before the last line): each round's
prediction again, from the profile scaled to the compute speed the run itself measured
(its compute-only passes), over the configurations with a network. The host's speed
drifts between a round's profile and its runs; what this line still misses is the
simulator's communication, overlap and wait, not the drift.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import kendalltau

MEDIAN_TARGET, WORST_TARGET, TAU_TARGET = 0.05, 0.10, 0.9
#: A round whose runs lost more of the host's CPU time than this to steal is disturbed.
STEAL_LIMIT = 0.05


def _quiet(rounds: list) -> list:
    return [r for r in rounds if (r.get("steal") or 0.0) <= STEAL_LIMIT]


def summarise(row: dict, cores: int, quiet_only: bool = False) -> dict | None:
    """One configuration's medians over its measured rounds (``quiet_only``: over its
    rounds under ``STEAL_LIMIT`` when it has any); None if none measured."""
    rounds = [r for r in row["rounds"] if r["measured_s"]]
    if quiet_only and _quiet(rounds):
        rounds = _quiet(rounds)
    if not rounds:
        return None
    predicted = np.array([r["predicted"]["step_s"] for r in rounds])
    measured = np.array([r["measured_s"] for r in rounds])
    ratio = float(np.median(predicted / measured))
    # The round whose prediction is the median one gives the printed parts.
    parts = sorted((r["predicted"] for r in rounds),
                   key=lambda p: p["step_s"])[(len(rounds) - 1) // 2]
    waiting = [r["waiting_cpu"] for r in rounds if r.get("waiting_cpu") is not None]
    spread = np.abs(measured / np.median(measured) - 1.0)
    return {**row, "parts": parts, "predicted_s": float(np.median(predicted)),
            "spread": float(np.median(spread)), "worst_spread": float(spread.max()),
            "steal": max((r.get("steal") or 0.0) for r in rounds),
            "waiting_cpu": float(np.median(waiting)) if waiting else None,
            "measured_s": float(np.median(measured)), "ratio": ratio,
            "error": abs(ratio - 1), "oversubscribed": row["nodes"] > cores,
            "measured_rounds": len(rounds)}


def statistics(rows: list) -> tuple:
    """(median error, worst error, Kendall τ) over ``rows``."""
    if not rows:
        return math.nan, math.nan, math.nan
    errors = [r["error"] for r in rows]
    tau = (kendalltau([r["predicted_s"] for r in rows], [r["measured_s"] for r in rows])
           .statistic if len(rows) > 1 else math.nan)
    return float(np.median(errors)), float(max(errors)), float(tau)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.2f}"


def _table(rows: list) -> None:
    print(f"{'nodes':>5} {'model':<12} {'mode':<10} {'wire':<4} {'link':<8} "
          f"{'compute':>9} {'comm':>9} {'exposed':>9} {'wait':>9} {'update':>9} "
          f"{'predicted':>9} {'measured':>9} {'ratio':>6}   (ms; medians over rounds)")
    for r in rows:
        p = r["parts"]
        print(f"{r['nodes']:>5} {r['model']:<12} {r['mode']:<10} {r['wire']:<4} "
              f"{r['rate']:<8} {_ms(p['compute_s'])} {_ms(p['communication_s'])} "
              f"{_ms(p['exposed_communication_s'])} {_ms(p['straggler_s'])} "
              f"{_ms(p['update_s'])} {_ms(r['predicted_s'])} {_ms(r['measured_s'])} "
              f"{r['ratio']:6.3f}" + ("   oversubscribed" if r["oversubscribed"] else ""))


def _oversubscription(rows: list, cores: int) -> None:
    """Where the step goes on N ranks against one: the CPU a rank burns while it waits
    in MPI, the profiled compute (its slow-down against the fair share of the cores,
    N/cores), and the measured step minus the predicted compute, wait and update (the
    communication training exposed) against the predicted exposed communication."""
    alone = {r["model"]: r["parts"]["compute_s"] for r in rows if r["nodes"] == 1}
    print(f"# what N ranks on {cores} cores do (blocking fp32 rows): profiled compute "
          f"against one rank's (fair share of the cores: max(1, N/{cores})); measured "
          f"exposed communication = measured step - predicted compute, wait and update")
    for r in rows:
        if r["mode"] != "blocking" or r["wire"] != "fp32" or r["nodes"] == 1:
            continue
        p = r["parts"]
        slow = (f"{p['compute_s'] / alone[r['model']]:.2f}x one rank's (fair share "
                f"{max(1.0, r['nodes'] / cores):.1f}x)" if r["model"] in alone else "")
        exposed = r["measured_s"] - p["compute_s"] - p["straggler_s"] - p["update_s"]
        polling = (f"; a rank waiting in MPI_Barrier used {r['waiting_cpu']:.2f} CPU s/s"
                   if r.get("waiting_cpu") is not None else "")
        print(f"#   {r['nodes']} nodes, {r['model']:<12} compute {slow}; exposed "
              f"communication measured {exposed * 1e3:.2f} ms, predicted "
              f"{p['exposed_communication_s'] * 1e3:.2f} ms{polling}")


def _line(label: str, rows: list) -> tuple:
    median, worst, tau = statistics(rows)
    met = median <= MEDIAN_TARGET and worst <= WORST_TARGET and tau >= TAU_TARGET
    print(f"# {label}: {len(rows)} configurations, median {median:.1%}, worst "
          f"{worst:.1%}, tau {tau:.2f} ({'targets met' if met else 'targets not met'}: "
          f"median <= {MEDIAN_TARGET:.0%}, worst <= {WORST_TARGET:.0%}, tau >= "
          f"{TAU_TARGET})")
    return median, worst, tau


def _host(raw_rows: list, rows: list, cores: int, chosen: tuple, over: list) -> tuple:
    """Print repeatability and steal (module docstring); the statistics of the last
    line: over the rounds under ``STEAL_LIMIT`` where every configuration has one."""
    several = [r for r in rows if r["measured_rounds"] > 1]
    if several:
        print(f"# repeatability: a configuration's measured step moved between rounds "
              f"by median {np.median([r['spread'] for r in several]):.1%} (worst "
              f"{max(r['worst_spread'] for r in several):.1%}) from its median over "
              f"rounds")
    steals = [r.get("steal") or 0.0 for row in raw_rows for r in row["rounds"]
              if r["measured_s"]]
    if not steals:
        return chosen
    disturbed = sum(s > STEAL_LIMIT for s in steals)
    print(f"# steal (CPU time the hypervisor gave other guests) during the runs: median "
          f"{np.median(steals):.1%}, most {max(steals):.1%}; {disturbed} of {len(steals)} "
          f"measurements above {STEAL_LIMIT:.0%}")
    if not disturbed:
        return chosen
    every = all(_quiet([r for r in row["rounds"] if r["measured_s"]])
                for row in raw_rows if any(r["measured_s"] for r in row["rounds"]))
    if not every:
        print("# some configuration has no round under the steal limit: the last line "
              "is over all rounds")
        return chosen
    quiet = [s for s in (summarise(r, cores, quiet_only=True) for r in raw_rows)
             if s is not None]
    if over and statistics([r for r in quiet if r["oversubscribed"]])[0] > MEDIAN_TARGET:
        quiet = [r for r in quiet if not r["oversubscribed"]]
    return _line("over the rounds under the steal limit (the last line)", quiet)


def _at_run_speed(raw_rows: list, cores: int) -> None:
    """The diagnostic line at the run's own compute speed (module docstring)."""
    scales = {}
    for row in raw_rows:
        for r in row["rounds"]:
            if r.get("run_compute_s") and r["predicted"].get("compute_s"):
                scales.setdefault(row["nodes"], []).append(
                    r["run_compute_s"] / r["predicted"]["compute_s"])
    if not scales:
        return
    print("# the runs' compute against the profiles' (run / profile, median and range "
          "over configurations and rounds): " + "; ".join(
              f"{n} node(s) {np.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
              for n, v in sorted(scales.items())))
    rows = []
    for row in raw_rows:
        rounds = [{**r, "predicted": {**r["predicted"], "step_s": r["predicted_at_run_speed_s"]}}
                  for r in row["rounds"]
                  if r["measured_s"] and r.get("predicted_at_run_speed_s")]
        if row["nodes"] > 1 and rounds:
            rows.append(summarise({**row, "rounds": rounds}, cores))
    if rows:
        _line("at the runs' own compute speed, configurations with a network", rows)


def _by_calibration(raw_rows: list, kind: str) -> list:
    """The rows with each round's predicted step from the ``kind`` calibration."""
    return [{**row, "rounds": [{**r, "predicted": {
        **r["predicted"], "step_s": r["predicted_by_calibration"][kind]}}
        for r in row["rounds"]]} for row in raw_rows]


def report(raw_rows: list, cores: int, calibrations=("quick",)) -> int:
    """Print the table, the oversubscription figures, the statistics and the last line;
    the exit status (1 if nothing was measured). With several ``calibrations`` the table
    is the first one's; the others' statistics are printed before the last line."""
    rows = [s for s in (summarise(r, cores) for r in raw_rows) if s is not None]
    missing = [r for r in raw_rows if summarise(r, cores) is None]
    for r in missing:
        print(f"# not measured: {r['nodes']} nodes {r['model']} {r['mode']} {r['wire']}")
    if not rows:
        print("no configuration was measured")
        return 1
    rows.sort(key=lambda r: (r["nodes"], r["model"], r["mode"], r["wire"]))
    _table(rows)
    _oversubscription(rows, cores)
    fitting = [r for r in rows if not r["oversubscribed"]]
    over = [r for r in rows if r["oversubscribed"]]
    chosen = _line("all rows", rows)
    if over:
        _line(f"without the oversubscribed rows ({len(over)} with more ranks than "
              f"{cores} cores)", fitting)
        over_median = statistics(over)[0]
        if not fitting:
            print("# every row is oversubscribed: the last line is over all rows")
        elif over_median > MEDIAN_TARGET:
            print(f"# the oversubscribed rows distort (their median error "
                  f"{over_median:.1%} > {MEDIAN_TARGET:.0%}): the last line is over the "
                  f"{len(fitting)} rows that are not oversubscribed")
            chosen = statistics(fitting)
        else:
            print(f"# the oversubscribed rows do not distort (their median error "
                  f"{over_median:.1%}): the last line is over all rows")
    chosen = _host(raw_rows, rows, cores, chosen, over)
    _at_run_speed(raw_rows, cores)
    for kind in calibrations[1:]:
        other = [s for s in (summarise(r, cores) for r in _by_calibration(raw_rows, kind))
                 if s is not None]
        _line(f"predicted with the {kind} calibration instead, all rows", other)
        if over:
            _line(f"predicted with the {kind} calibration, without the oversubscribed "
                  f"rows", [r for r in other if not r["oversubscribed"]])
    median, worst, tau = chosen
    from benchmark_targets import TARGETS
    TARGETS.judge("simulator step-time error (median, worst, tau)",
                  median <= MEDIAN_TARGET and worst <= WORST_TARGET and tau >= TAU_TARGET)
    print(f"simulator step-time error: median {median * 100:.1f}%, worst "
          f"{worst * 100:.1f}%, ranking tau {tau:.2f}")
    return 0
