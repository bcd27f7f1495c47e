"""``deep500 runs`` (the stored runs) and ``deep500 history`` (one configuration's
metric across git revisions, as airspeed velocity's per-benchmark view: one point per
run, every run of a revision, with its confidence interval as an error bar, runs
measured under interference marked, and the steps of a piecewise-constant fit
(:mod:`deep500.store.step_detection`), in a self-contained HTML page).

The configuration filter is ``key=value`` terms joined by commas; a configuration
matches when every term holds. ``key`` names a setting of the configuration, with dots
for nested ones (``operator.op_type``, ``optimizer.type``); ``value`` matches the
setting's value as text, or a spec's label, either whole or as its first words:
``operator=Relu`` matches the operator labelled ``Relu 8x16`` but not ``Relu6 8x16``.
A filter that matches several configurations is refused, listing them and the settings
that tell them apart.
"""
from __future__ import annotations

import html
import io
import json
import os

from deep500.store.database import Database, StoreError
from deep500.store.step_detection import detect_steps


# -- deep500 runs ---------------------------------------------------------------------

def runs_command(database: str | None = None, add: list | None = None,
                 as_json: bool = False, out=None) -> int:
    """Print the stored runs, oldest first (after storing the folders in ``add``)."""
    import sys
    out = out or sys.stdout
    with Database(database, create=bool(add)) as db:
        for folder in add or []:
            out.write(f"stored {folder} as run {db.ingest(folder)}\n")
        runs = db.runs()
    if as_json:
        out.write(json.dumps(runs, indent=2) + "\n")
        return 0
    if not runs:
        out.write(f"no runs stored in {db.path}\n")
        return 0
    header = ["id", "started", "recipe", "status", "configs", "git revision", "folder"]
    rows = [[str(r["id"]), (r["started"] or "")[:19].replace("T", " "), r["recipe"] or "",
             r["status"] or "", str(r["configurations"]), short_revision(r["git_revision"]),
             r["folder"]] for r in runs]
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
    return 0


def short_revision(revision: str | None) -> str:
    """``1ef2fa4a…-dirty`` → ``1ef2fa4 (dirty)``; None → ``—``."""
    if not revision:
        return "—"
    revision = str(revision)  # a hand-edited manifest may hold a number
    dirty = revision.endswith("-dirty")
    return revision[:7] + (" (dirty)" if dirty else "")


# -- the filter -----------------------------------------------------------------------

def parse_filter(text: str) -> list[tuple[list[str], str]]:
    """``framework=pytorch,operator.op_type=Relu`` → [(['framework'], 'pytorch'),
    (['operator', 'op_type'], 'Relu')]. Raises StoreError on a term without ``=``."""
    terms = []
    for term in (t.strip() for t in str(text).split(",")):
        if not term:
            continue
        key, equals, value = term.partition("=")
        if not equals or not key.strip():
            raise StoreError(f"--config {text!r}: {term!r} is not key=value; write e.g. "
                             f"framework=pytorch,operator=Relu")
        terms.append((key.strip().split("."), value.strip()))
    if not terms:
        raise StoreError(f"--config {text!r}: give at least one key=value term")
    return terms


def _text(value) -> list[str]:
    if isinstance(value, dict):
        texts = [str(value[k]) for k in ("label", "name", "op_type", "type") if k in value]
        return texts or [json.dumps(value, sort_keys=True)]
    return [str(value), json.dumps(value)]


def matches(configuration: dict, terms) -> bool:
    """Whether ``configuration`` satisfies every term of :func:`parse_filter`."""
    for path, wanted in terms:
        value = configuration
        for part in path:
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
        if not any(text == wanted or text.startswith(wanted + " ") for text in _text(value)):
            return False
    return True


def _differences(configurations: list[dict]) -> list[str]:
    """The settings whose values differ between ``configurations``."""
    keys = sorted({k for c in configurations for k in c})
    return [k for k in keys
            if len({json.dumps(c.get(k), sort_keys=True, default=str)
                    for c in configurations}) > 1]


# -- deep500 history ------------------------------------------------------------------

def _metric_value(row: dict, metric: str, field: str):
    """(value, ci_low, ci_high, unit) of ``metric.field`` in a stored measurement."""
    if metric == row["metric"]:
        samples = row["samples"]
        if field == "median":
            return row["median"], row["ci_low"], row["ci_high"], row["unit"]
        if field in ("mean", "min", "max") and samples:
            import numpy as np
            return float(getattr(np, field)(samples)), None, None, row["unit"]
    for entry in (row["record"].get("result") or {}).get("metrics") or []:
        if entry.get("metric") == metric:
            summary = entry.get("summary") or {}
            value = summary.get(field)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return None, None, None, None
            low, high = ((summary.get("ci_low"), summary.get("ci_high"))
                         if field == "median" else (None, None))
            unit = entry.get("unit")
            return value, low, high, None if unit in (None, "None") else unit
    return None, None, None, None


def _interference(row: dict) -> str | None:
    """What the telemetry sampler said of a stored measurement: None when it saw no
    interference (or did not watch), else its reason."""
    telemetry = row["record"].get("telemetry")
    if not isinstance(telemetry, dict) or not telemetry.get("interfered"):
        return None
    cores = telemetry.get("other_cpu_cores")
    return (f"other processes used {cores:.2g} cores"
            if isinstance(cores, (int, float)) else
            telemetry.get("reason") or "flagged by the telemetry sampler")


def series_points(group: list[dict], metric_name: str, field: str) -> tuple[list, str]:
    """(points, unit) of one configuration's stored measurements ``group``: one point
    per run, ordered by the run's start time, each with its revision, value, CI and
    whether it was measured under interference."""
    counts: dict = {}
    for row in group:
        counts[row["git_revision"] or f"run {row['run_id']}"] = \
            counts.get(row["git_revision"] or f"run {row['run_id']}", 0) + 1
    points, unit = [], None
    for row in sorted(group, key=lambda r: (r["started"] or "", r["run_id"])):
        value, low, high, row_unit = _metric_value(row, metric_name, field)
        unit = unit or row_unit
        revision = row["git_revision"]
        points.append({"revision": revision,
                       "short": short_revision(revision) if revision
                       else f"run {row['run_id']}", "run_id": row["run_id"],
                       "started": row["started"], "folder": row["folder"], "value": value,
                       "ci_low": low, "ci_high": high, "n": row["n"],
                       "interference": _interference(row),
                       "runs_at_revision": counts[revision or f"run {row['run_id']}"]})
    return points, unit


def series_steps(points: list[dict]) -> tuple[list[dict], str]:
    """The steps of ``points`` (:mod:`deep500.store.step_detection`), fitted on the
    points measured without interference (on every point when fewer than two are),
    and a sentence saying which points were fitted. Each step names the points on
    either side (indices into ``points``) and the ratio of the new level to the old."""
    valued = [i for i, p in enumerate(points) if p["value"] is not None]
    clean = [i for i in valued if not points[i]["interference"]]
    fitted = clean if len(clean) >= 2 else valued
    interfered = len(valued) - len(clean)
    if fitted is clean and interfered:
        basis = (f"steps fitted on the {len(clean)} runs measured without interference "
                 f"({interfered} interfered run(s) left out)")
    elif interfered:
        basis = (f"steps fitted on all {len(valued)} runs, {interfered} of them measured "
                 f"under interference (fewer than 2 clean runs)")
    else:
        basis = f"steps fitted on all {len(valued)} runs"
    widths = [(points[i]["ci_high"] - points[i]["ci_low"])
              if points[i]["ci_low"] is not None and points[i]["ci_high"] is not None
              else None for i in fitted]
    steps = detect_steps([points[i]["value"] for i in fitted], widths)
    return [{"before": fitted[step.before], "after": fitted[step.after],
             "from": points[fitted[step.before]]["short"],
             "to": points[fitted[step.after]]["short"],
             "level_before": step.level_before, "level_after": step.level_after,
             "ratio": step.ratio} for step in steps], basis


def grouped_rows(database: str | None, rank: int = 0, recipe: str | None = None,
                 terms=None) -> dict:
    """Stored measurements of rank ``rank`` (of ``recipe``, matching ``terms``),
    grouped by configuration key, in the order of their first run."""
    with Database(database, create=False) as db:
        rows = [r for r in db.measurements(rank=rank)
                if (terms is None or matches(r["configuration"], terms))
                and (recipe is None or r["recipe"] == recipe)]
    by_key: dict[str, list] = {}
    for row in rows:
        by_key.setdefault(row["config_key"], []).append(row)
    return by_key


def parse_metric(metric: str) -> tuple[str, str]:
    """``WallclockTime.median`` → ('WallclockTime', 'median'); StoreError otherwise."""
    metric_name, dot, field = metric.partition(".")
    if not dot or not metric_name or not field:
        raise StoreError(f"--metric {metric!r}: write METRIC.FIELD, e.g. "
                         f"WallclockTime.median or TestAccuracy.final")
    return metric_name, field


def history_points(database: str | None, config_filter: str,
                   metric: str = "WallclockTime.median", recipe: str | None = None,
                   rank: int = 0) -> dict:
    """The points of :func:`history_command`: ``{label, configuration, metric, unit,
    points: [{revision, short, run_id, started, folder, value, ci_low, ci_high, n,
    interference, runs_at_revision}], steps: [{before, after, from, to, level_before,
    level_after, ratio}], step_basis}``, one point per run (every run of a revision),
    ordered by start time. Raises StoreError when the filter matches no configuration
    or several (listing them)."""
    metric_name, field = parse_metric(metric)
    terms = parse_filter(config_filter)
    by_key = grouped_rows(database, rank, recipe, terms)
    if not by_key:
        raise StoreError(f"no stored measurement (rank {rank}"
                         + (f", recipe {recipe}" if recipe else "") +
                         f") matches --config {config_filter!r}; 'deep500 runs' lists the "
                         f"stored runs")
    if len(by_key) > 1:
        configurations = [group[-1]["configuration"] for group in by_key.values()]
        differing = _differences(configurations)
        listed = "\n".join(
            f"  {group[-1]['label'] or key}: " + ", ".join(
                f"{k}={_text(group[-1]['configuration'].get(k))[0]}" for k in differing) +
            f" ({len(group)} run(s))"
            for key, group in by_key.items())
        raise StoreError(f"--config {config_filter!r} matches {len(by_key)} configurations; "
                         f"add terms on {', '.join(differing)} to choose one:\n{listed}")
    group = next(iter(by_key.values()))
    points, unit = series_points(group, metric_name, field)
    if all(p["value"] is None for p in points):
        raise StoreError(f"--metric {metric!r}: the matching measurements have no such "
                         f"field (e.g. WallclockTime.median, FLOPs.gflops_per_s, "
                         f"TestAccuracy.final)")
    steps, basis = series_steps(points)
    return {"label": group[-1]["label"], "configuration": group[-1]["configuration"],
            "metric": metric, "unit": unit, "points": points, "steps": steps,
            "step_basis": basis}


def _svg(history: dict) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    points = history["points"]
    figure, axes = plt.subplots(figsize=(max(6.0, 0.45 * len(points) + 3), 4.0))
    for interfered, style in ((False, dict(fmt="o", color="C0", label=f"{history['metric']}"
                                           f" (95% CI where measured)")),
                              (True, dict(fmt="X", color="C3", markersize=8,
                                          label="⚠ measured under interference"))):
        chosen = [(i, p) for i, p in enumerate(points)
                  if p["value"] is not None and bool(p["interference"]) == interfered]
        if not chosen:
            continue
        lower = [p["value"] - p["ci_low"] if p["ci_low"] is not None else 0.0
                 for _, p in chosen]
        upper = [p["ci_high"] - p["value"] if p["ci_high"] is not None else 0.0
                 for _, p in chosen]
        axes.errorbar([i for i, _ in chosen], [p["value"] for _, p in chosen],
                      yerr=[lower, upper], capsize=4, **style)
    for number, step in enumerate(history["steps"]):
        middle = (step["before"] + step["after"]) / 2.0
        axes.axvline(middle, color="C1", linestyle="--", alpha=0.8,
                     label="step (piecewise-constant L1 fit)" if number == 0 else None)
        axes.annotate(f"×{step['ratio']:.3g}", (middle, 1.0), xycoords=("data",
                      "axes fraction"), ha="center", va="bottom", color="C1")
    axes.set_xticks(range(len(points)))
    axes.set_xticklabels([p["short"] for p in points], rotation=45, ha="right")
    axes.set_xlabel("git revision of each run (in the order run)")
    unit = f" [{history['unit']}]" if history["unit"] else ""
    axes.set_ylabel(history["metric"] + unit)
    axes.set_title(history["label"] or "", pad=16)
    axes.legend(loc="best", fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # inline: no XML declaration or DOCTYPE


def _steps_html(history: dict) -> str:
    if not history["steps"]:
        return f"<p>No step ({html.escape(history['step_basis'])}).</p>"
    items = "".join(
        f"<li>{html.escape(step['from'])} → {html.escape(step['to'])}: "
        f"{step['level_before']:.6g} → {step['level_after']:.6g} "
        f"(×{step['ratio']:.3g}, {'higher' if step['ratio'] > 1 else 'lower'})</li>"
        for step in history["steps"])
    return (f"<p>Steps ({html.escape(history['step_basis'])}):</p><ul>{items}</ul>")


def render_html(history: dict) -> str:
    """A self-contained page: the plot as inline SVG, the steps, then the table of
    points."""
    def fmt(value):
        return "—" if value is None else f"{value:.6g}"
    rows = "\n".join(
        f"<tr><td>{html.escape(p['short'])}</td><td>{p['run_id']}</td>"
        f"<td>{html.escape(str(p['started']))}</td><td>{fmt(p['value'])}</td>"
        f"<td>[{fmt(p['ci_low'])}, {fmt(p['ci_high'])}]</td><td>{p['n'] or '—'}</td>"
        f"<td>{html.escape('⚠ ' + p['interference']) if p['interference'] else '—'}</td>"
        f"<td>{p['runs_at_revision']}</td><td>{html.escape(p['folder'])}</td></tr>"
        for p in history["points"])
    configuration = html.escape(json.dumps(history["configuration"], indent=1,
                                           sort_keys=True, default=str))
    title = html.escape(f"{history['label']} — {history['metric']}")
    interfered = sum(1 for p in history["points"] if p["interference"])
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}</style></head>
<body><h1>{title}</h1>
<p>One point per run (every run of a revision), in the order the runs started; error
bars: the 95% nonparametric confidence interval of the median where one was measured;
{interfered} of {len(history['points'])} run(s) measured under interference (red ✕).</p>
{_svg(history)}
{_steps_html(history)}
<table><tr><th>revision</th><th>run</th><th>started</th><th>{html.escape(history['metric'])}
{html.escape(' [' + history['unit'] + ']' if history['unit'] else '')}</th><th>CI</th>
<th>n</th><th>interference</th><th>runs at revision</th><th>folder</th></tr>
{rows}
</table>
<h2>Configuration</h2><pre>{configuration}</pre>
</body></html>
"""


def history_command(config_filter: str, out_path: str, database: str | None = None,
                    metric: str = "WallclockTime.median", recipe: str | None = None,
                    rank: int = 0, out=None) -> int:
    """``deep500 history``: write the page and say where."""
    import sys
    history = history_points(database, config_filter, metric, recipe, rank)
    folder = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(folder, exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as handle:
        handle.write(render_html(history))
    points = history["points"]
    revisions = len({p["revision"] or p["short"] for p in points})
    interfered = sum(1 for p in points if p["interference"])
    steps = "; ".join(f"{step['from']} → {step['to']} ×{step['ratio']:.3g}"
                      for step in history["steps"]) or "none"
    (out or sys.stdout).write(f"{out_path}: {history['label']}, {len(points)} run(s) of "
                              f"{revisions} revision(s), {interfered} under interference; "
                              f"steps: {steps}\n")
    return 0
