"""The report's section "Default versus best collective", for distributed runs whose
configurations timed their allreduce per message size (``allreduce_sizes``;
``recipes/allreduce_choice.yaml``): what choosing the allreduce algorithm gains over
taking the default, per message size and in a training step (Catalán's thesis,
Figs. 5.11–5.15).

A *choice* is one allreduce: MPICH's ``MPI_Allreduce`` under one value of
``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` (``MPICH ring``; the value each record's rank
started with, ``details["allreduce_sizes"]["mpich_allreduce"]``), or one of Deep500's
own algorithms (``Deep500 ring``). The *default* is what a user gets without choosing:
``MPICH auto`` (MPICH's own selection) where the run has it, for the "vs default"
columns; Deep500's default algorithm (the registry's first, ``ring``) is the default
of Deep500's own, and its best is given against it too.

From rank 0's records (``details["allreduce_sizes"]``, and the training the same
configuration ran after it, ``details["distributed"]``):

* per message size, a table: choice | time (median of the slowest rank's call, 95% CI)
  | bus bandwidth 2(p−1)/p · n / t (NCCL's busbw) | time / the default's time;
* a summary per size: the default, the best of MPICH's choices, of Deep500's, and of
  all, each with its speedup over its default ("best vs default");
* the training step with each choice: the median over steps of the slowest rank's
  ``optimizer.step`` time (``synchronous_step_times``), with the step's own allreduce
  size (the fused gradients);
* plots: time against size per choice (log-log, defaults dashed), and the best's
  speedup over the default against size, with the training step's as a line.
"""
from __future__ import annotations

import math
import statistics as stats

from deep500.lv3_distributed.collectives import allreduce_names
from deep500.lv3_distributed.distributed_training import synchronous_step_times
from deep500.report import collective_choice_plots
from deep500.report.distributed_records import distributed, global_epochs, training_seconds
from deep500.report.records import ReportContext, configuration_key, value_text
from deep500.report.tables import Table, fmt_time

MPICH_DEFAULT = "MPICH auto"
DEEP500_DEFAULT = f"Deep500 {allreduce_names()[0]}"
# What the section's choices differ in, and what it groups over.
CHOICE_KEYS = ("scheme", "mpich_allreduce", "seed")


def sweep(record: dict) -> dict | None:
    return (record.get("result") or {}).get("details", {}).get("allreduce_sizes")


def choice(record: dict) -> str:
    """``MPICH <algorithm in effect>`` or ``Deep500 <algorithm>``."""
    timed = sweep(record)
    if timed["algorithm"] == "mpi":
        return f"MPICH {timed['mpich_allreduce']}"
    return f"Deep500 {timed['algorithm']}"


def size_text(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def step_seconds(record: dict) -> float | None:
    """Median over steps of the slowest rank's optimizer step."""
    steps = synchronous_step_times(distributed(record).get("ranks") or [])
    return stats.median(steps) if steps else None


def _records(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("experiment") == "distributed"
            and r.get("kind") == "measurement" and r.get("rank", 0) == 0 and sweep(r)]


def _groups(records: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for record in records:
        key = configuration_key(record["configuration"], without=CHOICE_KEYS)
        groups.setdefault(key, []).append(record)
    return groups


def _title(records: list[dict], group: list[dict]) -> str:
    """What tells this group from the others, for titles ("" when it is the only one)."""
    if len(_groups(records)) == 1:
        return ""
    first = group[0]["configuration"]
    varied = sorted({k for r in records for k, v in r["configuration"].items()
                     if k not in CHOICE_KEYS and v != first.get(k)})
    return " — " + ", ".join(f"{k} {value_text(first.get(k))}" for k in varied)


class ChoiceTimes:
    """Per choice, per message size, the timed allreduce; and each choice's training
    step, epoch time and final accuracy (the first seed's record where several)."""
    mpich_default, deep500_default = MPICH_DEFAULT, DEEP500_DEFAULT

    def __init__(self, group: list[dict]):
        self.records = {}
        for record in sorted(group, key=lambda r: r["configuration"].get("seed", 0)):
            self.records.setdefault(choice(record), record)
        self.choices = sorted(self.records, key=lambda c: (not c.startswith("MPICH"),
                                                           c not in (MPICH_DEFAULT,
                                                                     DEEP500_DEFAULT), c))
        self.times = {c: {row["bytes"]: row for row in sweep(r)["sizes"]}
                      for c, r in self.records.items()}
        self.sizes = sorted({n for rows in self.times.values() for n in rows})
        first = next(iter(self.records.values()))
        self.ranks = sweep(first)["ranks"]
        self.gradient_bytes = sweep(first).get("gradient_bytes")
        self.default = next((c for c in (MPICH_DEFAULT, DEEP500_DEFAULT)
                             if c in self.records), None)

    def median(self, name: str, nbytes: int) -> float | None:
        row = self.times[name].get(nbytes)
        return row["median"] if row else None

    def best(self, nbytes: int, prefix: str = "") -> str | None:
        timed = [(self.median(c, nbytes), c) for c in self.choices
                 if c.startswith(prefix) and self.median(c, nbytes) is not None]
        return min(timed)[1] if timed else None

    def step(self, name: str) -> float | None:
        return step_seconds(self.records[name])


def _ratio(value, reference) -> str:
    if value is None or not reference:
        return "n/a"
    return f"{value / reference:.2f}×"


def _speedup(best, default) -> str:
    return "n/a" if best is None or not default else f"{default / best:.2f}× faster"


def _busbw(nbytes: int, seconds: float, ranks: int) -> str:
    if not seconds:
        return "n/a"
    return f"{2 * (ranks - 1) / ranks * nbytes / seconds / 1e6:.4g} MB/s"


def _size_table(times: ChoiceTimes, nbytes: int, title: str) -> Table:
    reference = times.median(times.default, nbytes) if times.default else None
    best = times.best(nbytes)
    rows = []
    for name in sorted(times.choices,
                       key=lambda c: times.median(c, nbytes) or float("inf")):
        row = times.times[name].get(nbytes)
        if row is None:
            continue
        marks = " (default)" if name == times.default else ""
        marks += " ★ best" if name == best else ""
        low, high = row.get("ci_low"), row.get("ci_high")
        ci = (f" [{fmt_time(low)}, {fmt_time(high)}]"   # none from fewer than 6 calls
              if isinstance(low, float) and math.isfinite(low) else "")
        rows.append([name + marks, fmt_time(row["median"]) + ci,
                     _busbw(nbytes, row["median"], times.ranks),
                     _ratio(row["median"], reference), row["repeats"]])
    gradient = (" (the size of the training step's allreduce)"
                if nbytes == times.gradient_bytes else "")
    return Table(f"Allreduce of {size_text(nbytes)} on {times.ranks} ranks"
                 f"{gradient}{title}",
                 ["Algorithm", "Time (median [95% CI])", "Bus bandwidth",
                  f"vs default ({times.default})", "Calls timed"], rows)


def _summary_table(times: ChoiceTimes, title: str) -> Table:
    rows = []
    for nbytes in times.sizes:
        auto = (times.median(MPICH_DEFAULT, nbytes)
                if MPICH_DEFAULT in times.records else None)
        ring = (times.median(DEEP500_DEFAULT, nbytes)
                if DEEP500_DEFAULT in times.records else None)
        row = [size_text(nbytes), fmt_time(auto)]
        for prefix, default in (("MPICH", auto), ("Deep500", ring)):
            best = times.best(nbytes, prefix)
            value = times.median(best, nbytes) if best else None
            row.append("n/a" if best is None else f"{best} {fmt_time(value)} (" + (
                "the default" if best in (MPICH_DEFAULT, DEEP500_DEFAULT)
                else _speedup(value, default)) + ")")
        overall = times.best(nbytes)
        value = times.median(overall, nbytes)
        reference = times.median(times.default, nbytes) if times.default else None
        row += [fmt_time(ring), f"{overall} {fmt_time(value)}",
                _speedup(value, reference)]
        rows.append(row)
    note = (f"Best versus default per message size: MPICH's own choice ({MPICH_DEFAULT}) "
            f"against the best value of MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM, Deep500's "
            f"default ({DEEP500_DEFAULT}) against the best of its algorithms, and the best "
            f"of all against the default ({times.default}). Times: the slowest rank's "
            f"call, median; {times.ranks} ranks, float32 sums.")
    return Table(f"Default versus best collective — per message size{title}",
                 ["Message size", MPICH_DEFAULT, "Best MPICH choice (vs auto)",
                  "Best Deep500 algorithm (vs ring)", DEEP500_DEFAULT, "Best of all",
                  f"Best vs default ({times.default})"], rows, note=note)


def _step_table(times: ChoiceTimes, title: str) -> Table:
    reference = times.step(times.default) if times.default else None
    steps = {name: times.step(name) for name in times.choices}
    timed = [(s, n) for n, s in steps.items() if s is not None]
    best = min(timed)[1] if timed else None
    rows = []
    for name in sorted(times.choices, key=lambda c: steps[c] or float("inf")):
        record = times.records[name]
        epochs = training_seconds(record)
        epochs_seen = global_epochs(record)
        final = epochs_seen[-1]["test_accuracy"] if epochs_seen else None
        marks = (" (default)" if name == times.default else "") + (
            " ★ best" if name == best else "")
        rows.append([name + marks, fmt_time(steps[name]), _ratio(steps[name], reference),
                     fmt_time(stats.median(epochs)) if epochs else "n/a",
                     "n/a" if final is None else f"{final:.1%}"])
    gain = (f" Best versus default in a step: {best}, {_speedup(steps[best], reference)} "
            f"than {times.default}." if best and reference else "")
    size = (f" The step allreduces the fused gradients, {size_text(times.gradient_bytes)},"
            f" once." if times.gradient_bytes else "")
    note = ("Each choice trains the same model from the same weights on the same data "
            "(synchronous data-parallel SGD, ConsistentDecentralized); a step is the "
            "slowest rank's optimizer.step (forward, backward, allreduce, update), median "
            f"over the steps; epoch time without validation.{size}{gain}")
    return Table(f"Default versus best collective — training step{title}",
                 ["Allreduce", "Training step (median)", f"vs default ({times.default})",
                  "Epoch time (median)", "Final test acc."], rows, note=note)


def build(records: list[dict], output_dir: str,
          context: ReportContext | None = None) -> dict:
    context = context or ReportContext({})
    chosen = _records(records)
    section = {"tables": [], "plots": [], "warnings": []}
    for index, group in enumerate(_groups(chosen).values()):
        title = _title(chosen, group)
        times = ChoiceTimes(group)
        section["tables"].append(_summary_table(times, title))
        section["tables"] += [_size_table(times, n, title) for n in times.sizes]
        section["tables"].append(_step_table(times, title))
        section["plots"].append(collective_choice_plots.plot(
            times, output_dir, index, title, context.figure_format))
        over = {r["oversubscribed"]["usable_cpus"] for r in group
                if r.get("oversubscribed")}
        if over:
            section["warnings"].append(
                f"default versus best collective{title}: the ranks outnumber the "
                f"{min(over)} usable CPU(s); the times measure time sharing too")
    return section
