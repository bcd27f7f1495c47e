"""The report's section "Predicted vs measured", for runs of ``experiment: models``
(:mod:`deep500.recipe.experiments.models`): per configuration and rank count the
predicted parts of a training step (compute, exposed communication, wait for the
slowest rank, update; ``d5.simulate_training``), the measured step and their ratio; the
error |predicted / measured − 1| per model and per allreduce algorithm (median and the
worst row); a y = x scatter plot; and the predicted scaling curves (weak and strong,
step time and parallel efficiency against ranks) on this machine's model and on the
machine files shipped with Deep500.

Everything comes from rank 0's records (``details["models"]``); the other ranks'
records carry the same metric, for acceptance.
"""
from __future__ import annotations

import os
import statistics

from deep500.report.prediction_plots import prediction_scatter, scaling_curves
from deep500.report.records import ReportContext, flags, measurement_warnings, verdict
from deep500.report.tables import Table, fmt_time

#: The experiment whose records this section shows (and no other section does).
EXPERIMENTS = ("models",)
#: The ±band drawn around y = x in the scatter plot.
BAND = 0.25


def _details(record: dict) -> dict:
    return (record.get("result") or {}).get("details", {}).get("models") or {}


def _model(record: dict) -> str:
    network = record["configuration"].get("network") or {}
    return network.get("label") or str(network)


def _label(record: dict, ranks: int) -> str:
    configuration = record["configuration"]
    where = f"{configuration.get('algorithm')}, {ranks} ranks" if ranks > 1 else "1 rank"
    return f"{_model(record)}, batch {configuration.get('batch_size')}/rank, {where}"


def _percent(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _rows(measured: list[dict]) -> list[dict]:
    """One row per (record, rank count compared)."""
    rows = []
    for record in measured:
        for comparison in _details(record).get("comparisons", []):
            ranks = comparison["ranks"]
            rows.append({"record": record, "ranks": ranks, "model": _model(record),
                         "algorithm": (record["configuration"].get("algorithm")
                                       if ranks > 1 else "1 rank (no allreduce)"),
                         "label": _label(record, ranks),
                         "predicted": comparison["predicted"],
                         "measured": comparison["measured"],
                         "ratio": comparison["ratio"], "error": comparison["error"]})
    return rows


def error_groups(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """(group name, rows): per model, per algorithm (the rows on more than one rank;
    the 1-rank rows, where nothing is communicated, form a group of their own), and
    all rows."""
    groups = []
    for model in dict.fromkeys(r["model"] for r in rows):
        groups.append((f"model: {model}", [r for r in rows if r["model"] == model]))
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        chosen = [r for r in rows if r["algorithm"] == algorithm]
        ranks = sorted({r["ranks"] for r in chosen})
        name = (algorithm if ranks == [1] else
                f"algorithm: {algorithm} ({', '.join(map(str, ranks))} ranks)")
        groups.append((name, chosen))
    groups.append(("all", rows))
    return groups


def build(records: list[dict], output_dir: str, context: ReportContext | None = None) -> dict:
    context = context or ReportContext({})
    mine = [r for r in records if r.get("experiment") in EXPERIMENTS]
    measured_all = [r for r in mine if r["kind"] == "measurement"]
    measured = [r for r in measured_all if r.get("rank", 0) == 0 and _details(r)]
    failed = [r for r in mine if r["kind"] == "error"]
    rows = _rows(measured)
    tables = []
    if rows:
        tables += [_step_table(rows, measured, context), _error_table(rows)]
        scaling = _scaling_table(measured)
        if scaling.rows:
            tables.append(scaling)
    if failed:
        tables.append(Table("Predicted vs measured — configurations that failed",
                            ["Configuration", "Rank", "Error"],
                            [[r.get("label"), r.get("rank", 0), r.get("error")]
                             for r in failed]))
    plots = _plots(rows, measured, output_dir, context) if rows else []
    return {"tables": tables, "plots": plots, "measured": len(measured),
            "failed": len({r["index"] for r in failed}),
            "warnings": measurement_warnings(measured, lambda r: r.get("label", "")),
            "acceptance_failures": sum(1 for r in measured_all if not r.get("passed", True))}


def _machine_text(measured: list[dict]) -> str:
    machine = _details(measured[0]).get("machine") or {}
    given = machine.get("given_by")
    if given == "calibrated":
        how = (f"calibrated at the start of the run ({machine.get('calibration_s', 0):.1f} s, "
               f"quick: ping-pong, allreduce call overhead, gamma, bandwidth, peaks) into "
               f"{os.path.basename(machine.get('path') or 'machine.yaml')}")
        if not machine.get("network"):
            how += " without a network part (one rank)"
    else:
        how = f"the machine file given by {given}: {machine.get('path')}"
    return f"Machine model '{machine.get('name')}': {how}."


def _step_table(rows: list[dict], measured: list[dict], context: ReportContext) -> Table:
    sizes = sorted({_details(r).get("world_size", 1) for r in measured})
    notes = list(dict.fromkeys(n for r in measured for n in _details(r).get("notes", [])))
    note = (_machine_text(measured) + " Predicted: d5.simulate_training on rank 0's "
            "measured step profile (per ONNX node forward and backward, compute outside "
            "the nodes, fusion copy, update) and the machine model, blocking allreduce of "
            "the fused fp32 gradients. Measured: ConsistentDecentralized training, median "
            "over the timed steps of the slowest rank's step (1 rank: on MPI_COMM_SELF, "
            "every rank alone at once, nothing communicated). Measured phases: mean per "
            "step, slowest rank. Error: |predicted / measured − 1|.")
    if sizes == [1]:
        note += (" This run had 1 process: only 1-rank steps were measured; run "
                 "'deep500 run --np 2 RECIPE' to measure and predict the allreduce.")
    if notes:
        note += " Notes: " + "; ".join(notes) + "."
    table = Table("Predicted vs measured — step time", [
        "Model", "Batch/rank", "Algorithm", "Ranks", "Compute (pred.)",
        "Exposed comm. (pred.)", "Wait (pred.)", "Update (pred.)", "Predicted",
        "Measured", "Measured compute / comm. / update", "Pred./meas.", "Error", "Flags",
        "Acceptance"], note=note)
    for row in rows:
        predicted, measured_part = row["predicted"], row["measured"]
        phases = measured_part.get("phases_s") or {}
        table.rows.append([
            row["model"], row["record"]["configuration"].get("batch_size"),
            row["algorithm"], row["ranks"], fmt_time(predicted.get("compute_s")),
            fmt_time(predicted.get("exposed_communication_s")),
            fmt_time(predicted.get("straggler_s")), fmt_time(predicted.get("update_s")),
            fmt_time(predicted["step_s"]), fmt_time(measured_part["step_s"]),
            " / ".join(fmt_time(phases.get(k)) for k in ("compute", "communication",
                                                           "update")),
            f"{row['ratio']:.2f}", _percent(row["error"]),
            flags(row["record"], context.ci_threshold), verdict(row["record"])])
    return table


def _error_table(rows: list[dict]) -> Table:
    table = Table("Predicted vs measured — error per model and per algorithm", [
        "Group", "Rows", "Median error", "Worst row", "Worst error",
        "Worst pred. / meas."], note=(
        "Error: |predicted / measured − 1| of the step time, per configuration "
        "and rank count; the allreduce algorithms' groups hold the rows on more than "
        "one rank, the 1-rank rows (compute and update only) are a group of their own."))
    for name, chosen in error_groups(rows):
        worst = max(chosen, key=lambda r: r["error"])
        table.rows.append([
            name, len(chosen), _percent(statistics.median(r["error"] for r in chosen)),
            worst["label"],
            _percent(worst["error"]),
            f"{fmt_time(worst['predicted']['step_s'])} / "
            f"{fmt_time(worst['measured']['step_s'])}"])
    return table


def _curve_at(curve: list[dict], ranks: int) -> dict | None:
    return next((row for row in curve if row["ranks"] == ranks), None)


def _scaling_table(measured: list[dict]) -> Table:
    table = Table("Predicted vs measured — scaling curves (predicted)", [
        "Model", "Batch/rank", "Algorithm", "Machine", "Weak: step at 1 rank",
        "Weak: step at largest", "of which comm. / wait", "Weak: efficiency at largest",
        "Strong: global batch",
        "Strong: best speedup (ranks)"], note=(
        "Predicted only (nothing at these scales was measured): d5.simulate_training "
        "with the step profile measured here and each machine model's network. Weak "
        "scaling keeps the batch per rank (efficiency T(1)/T(p)); strong scaling splits "
        "the world's global batch over the ranks (down to one sample per rank). The "
        "wait for the slowest rank is the median of the maximum over the ranks of the "
        "profiled step times (their quantile 0.5^(1/p)), so at large p the slowest "
        "steps of the profile, e.g. under interference, dominate it. The "
        "model assumes a contention-free network, one rank per node and this host's "
        "compute (docs/performance_models.md)."))
    for record in measured:
        configuration = record["configuration"]
        for curve in _details(record).get("scaling", []):
            weak, strong = curve["weak"], curve["strong"]
            if not weak:
                continue
            best = max(strong, key=lambda r: r.get("speedup") or 0) if strong else None
            table.rows.append([
                _model(record), configuration.get("batch_size"), curve["algorithm"],
                curve["machine"], fmt_time(weak[0]["step_s"]),
                f"{fmt_time(weak[-1]['step_s'])} ({weak[-1]['ranks']} ranks)",
                f"{fmt_time(weak[-1].get('exposed_communication_s'))} / "
                f"{fmt_time(weak[-1].get('straggler_s'))}",
                _percent(weak[-1].get("parallel_efficiency")), curve["global_batch"],
                "n/a" if best is None else f"{best['speedup']:.2f} ({best['ranks']})"])
    return table


def _plots(rows, measured, output_dir, context) -> list[tuple[str, str]]:
    folder = os.path.join(output_dir, "plots")
    also = context.figure_format
    plots = []
    points = [{"model": r["model"], "algorithm": r["algorithm"],
               "predicted_s": r["predicted"]["step_s"], "measured_s": r["measured"]["step_s"]}
              for r in rows]
    path = prediction_scatter(os.path.join(folder, "models_predicted_vs_measured.png"),
                              "Training step: predicted against measured", points,
                              band=BAND, also=also)
    plots.append((f"Predicted against measured step time, one point per configuration "
                  f"and rank count (colour: model, marker: algorithm; the line y = x, "
                  f"dotted ±{BAND:.0%})", path))
    # One figure per model, at its smallest batch per rank: every algorithm and machine.
    for index, model in enumerate(dict.fromkeys(_model(r) for r in measured)):
        chosen = [r for r in measured if _model(r) == model and _details(r).get("scaling")]
        if not chosen:
            continue
        batch = min(r["configuration"].get("batch_size") for r in chosen)
        panels = {key: {} for key in ("weak step", "weak eff", "strong step", "strong eff")}
        styles, global_batch = {}, None
        algorithms = list(dict.fromkeys(r["configuration"].get("algorithm") for r in chosen))
        machines = list(dict.fromkeys(c["machine"] for r in chosen
                                      for c in _details(r)["scaling"]))
        for record in chosen:
            if record["configuration"].get("batch_size") != batch:
                continue
            for curve in _details(record)["scaling"]:
                name = f"{curve['algorithm']} · {curve['machine']}"
                styles[name] = (algorithms.index(curve["algorithm"]),
                                machines.index(curve["machine"]))
                weak, strong = curve["weak"], curve["strong"]
                global_batch = curve["global_batch"]
                ranks_w = [r["ranks"] for r in weak]
                ranks_s = [r["ranks"] for r in strong]
                panels["weak step"][name] = (ranks_w, [r["step_s"] * 1e3 for r in weak])
                panels["weak eff"][name] = (ranks_w, [r.get("parallel_efficiency")
                                                      for r in weak])
                panels["strong step"][name] = (ranks_s, [r["step_s"] * 1e3 for r in strong])
                panels["strong eff"][name] = (ranks_s, [r.get("strong_efficiency")
                                                        for r in strong])
        path = scaling_curves(
            os.path.join(folder, f"models_scaling_{index}.png"),
            f"{model}: predicted scaling ({batch} per rank; strong: global batch "
            f"{global_batch})",
            [(f"weak: step time ({batch}/rank)", "predicted step (ms)", panels["weak step"]),
             ("weak: parallel efficiency", "T(1) / T(p)", panels["weak eff"]),
             (f"strong: step time (global {global_batch})", "predicted step (ms)",
              panels["strong step"]),
             ("strong: parallel efficiency", "T(1) / (p T(p))", panels["strong eff"])],
            log_y=(0, 2), styles=styles, also=also)
        plots.append((f"{model}: predicted step time and parallel efficiency against "
                      f"ranks (log2), weak and strong scaling (colour: allreduce "
                      f"algorithm, line style: machine model)", path))
    return plots
