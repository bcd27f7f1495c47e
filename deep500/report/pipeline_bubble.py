"""The Level-3 report's pipeline table: for each pipeline configuration
(``details["pipeline"]`` of ``experiment: parallelism``), the split, the schedule, the
bubble fraction measured, by GPipe's formula (S − 1)/(M + S − 1) (Huang et al.,
NeurIPS 2019) and by the timeline model of the measured stage times, and the step
measured against the timeline model's, each the median over epochs
(:mod:`deep500.lv3_distributed.pipeline.step_model`)."""
from __future__ import annotations

import statistics

from deep500.report.tables import Table, fmt_time


def pipeline_table(records: list[dict], heads: list, head) -> Table:
    """One row per rank-0 record of a pipeline; ``heads``/``head``: the Level-3
    section's leading columns and how a record fills them."""
    table = Table("Level 3 — pipeline stages and bubble", [
        *heads, "Stages x pipelines", "Microbatches", "Schedule", "Nodes per stage",
        "Bubble measured", "Bubble, GPipe formula", "Bubble modelled", "Step measured",
        "Step modelled", "Measured / modelled"], note=(
        "Bubble: the share of the stages' time idle in a step, 1 - sum of the stages' "
        "busy seconds / (stages x the slowest stage's step), median over steps and then "
        "over epochs (measured); (S-1)/(M+S-1), GPipe's for equal stages and free "
        "messages (formula); the schedule's timeline of the measured per-stage forward "
        "and backward seconds, each message priced by the run's machine file (alpha + "
        "beta n) where it has one, else free (modelled, with the modelled step). A "
        "measured bubble above the model is time the model leaves out: messages, "
        "copies and waits between the executors' runs, and other processes."))
    for record in records:
        if record.get("rank", 0) != 0:
            continue
        details = record.get("result", {}).get("details", {}).get("pipeline")
        if not details:
            continue
        epochs = [b for b in details.get("bubble_per_epoch") or [] if b]

        def median(key):
            values = [b[key] for b in epochs if b.get(key) is not None]
            return statistics.median(values) if values else None
        measured, modelled = median("step_seconds"), median("modelled_step_seconds")
        ratio = f"{measured / modelled:.2f}" if measured and modelled else "n/a"
        table.rows.append([
            *head(record), f"{details['stages']} x {details['data_parallel']}",
            details["microbatches"], details["schedule"],
            ", ".join(str(len(nodes)) for nodes in details.get("stage_nodes", [])),
            _share(median("measured")), _share(median("gpipe_formula")),
            _share(median("modelled")), fmt_time(measured), fmt_time(modelled), ratio])
    return table


def _share(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"
