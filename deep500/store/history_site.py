"""``deep500 history --all --out SITE/``: an index page of every stored configuration's
history, as ``asv publish`` writes one: a row per configuration with a sparkline of its
metric over every run, the latest value, the runs measured under interference and the
last step found (:mod:`deep500.store.step_detection`), each linking to the
configuration's own history page (:func:`deep500.store.history.render_html`).

The sparklines are inline SVG polylines (no plotting library, no external file), so the
index stays one self-contained file however many configurations it lists.
"""
from __future__ import annotations

import hashlib
import html
import os
import re

from deep500.store.database import StoreError
from deep500.store.history import (grouped_rows, parse_metric, render_html, series_points,
                                   series_steps)

SPARK_WIDTH, SPARK_HEIGHT = 160, 28


def sparkline(points: list[dict], steps: list[dict]) -> str:
    """An inline SVG of ``points``' values (min to max over the height), interfered
    runs as red dots, steps as orange ticks."""
    valued = [(i, p["value"]) for i, p in enumerate(points) if p["value"] is not None]
    if not valued:
        return "—"
    low = min(v for _, v in valued)
    high = max(v for _, v in valued)
    span = high - low or 1.0
    last = max(len(points) - 1, 1)

    def x(i):
        return 2 + (SPARK_WIDTH - 4) * i / last

    def y(v):
        return SPARK_HEIGHT - 3 - (SPARK_HEIGHT - 6) * (v - low) / span
    line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in valued)
    marks = "".join(f'<circle cx="{x(i):.1f}" cy="{y(p["value"]):.1f}" r="2.2" '
                    f'fill="#d62728"/>' for i, p in enumerate(points)
                    if p["value"] is not None and p["interference"])
    ticks = "".join(f'<line x1="{x((s["before"] + s["after"]) / 2):.1f}" y1="0" '
                    f'x2="{x((s["before"] + s["after"]) / 2):.1f}" y2="{SPARK_HEIGHT}" '
                    f'stroke="#ff7f0e" stroke-dasharray="2,2"/>' for s in steps)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{SPARK_WIDTH}" '
            f'height="{SPARK_HEIGHT}" role="img"><title>{len(valued)} run(s), '
            f'{low:.4g} to {high:.4g}</title>{ticks}<polyline points="{line}" '
            f'fill="none" stroke="#1f77b4" stroke-width="1.5"/>{marks}</svg>')


def page_name(label: str, config_key: str) -> str:
    """A file name for a configuration's page: its label made safe, and a hash of its
    whole configuration (two configurations may share a label)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label or "configuration").strip("_")[:60]
    return f"{safe}-{hashlib.sha1(config_key.encode()).hexdigest()[:10]}.html"


def write_site(folder: str, database: str | None = None,
               metric: str = "WallclockTime.median", recipe: str | None = None,
               rank: int = 0) -> tuple[str, int]:
    """Write ``folder/index.html`` and one page per configuration; return the index's
    path and the number of configurations. StoreError when none is stored."""
    metric_name, field = parse_metric(metric)
    by_key = grouped_rows(database, rank, recipe)
    entries = []
    for key, group in by_key.items():
        points, unit = series_points(group, metric_name, field)
        if all(p["value"] is None for p in points):
            continue
        steps, basis = series_steps(points)
        history = {"label": group[-1]["label"], "configuration": group[-1]["configuration"],
                   "metric": metric, "unit": unit, "points": points, "steps": steps,
                   "step_basis": basis}
        entries.append((group[-1]["recipe"] or "", history, page_name(history["label"],
                                                                       key)))
    if not entries:
        raise StoreError(f"no stored measurement (rank {rank}"
                         + (f", recipe {recipe}" if recipe else "") +
                         f") has {metric}; 'deep500 runs' lists the stored runs")
    os.makedirs(folder, exist_ok=True)
    for _, history, name in entries:
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            handle.write(render_html(history))
    index = os.path.join(folder, "index.html")
    with open(index, "w", encoding="utf-8") as handle:
        handle.write(_index_html(sorted(entries, key=lambda e: (e[0], e[1]["label"] or "")),
                                 metric))
    return index, len(entries)


def _index_html(entries: list, metric: str) -> str:
    def fmt(value):
        return "—" if value is None else f"{value:.4g}"
    rows = []
    for recipe, history, name in entries:
        points = history["points"]
        latest = next((p for p in reversed(points) if p["value"] is not None), None)
        interfered = sum(1 for p in points if p["interference"])
        step = history["steps"][-1] if history["steps"] else None
        step_text = (f"{html.escape(step['from'])} → {html.escape(step['to'])} "
                     f"×{step['ratio']:.3g}" if step else "—")
        unit = f" {history['unit']}" if history["unit"] else ""
        rows.append(
            f"<tr><td>{html.escape(recipe)}</td><td><a href=\"{html.escape(name)}\">"
            f"{html.escape(history['label'] or '')}</a></td>"
            f"<td>{sparkline(points, history['steps'])}</td><td>{len(points)}</td>"
            f"<td>{fmt(latest and latest['value'])}{html.escape(unit)}</td>"
            f"<td>{interfered or '—'}</td><td>{step_text}</td></tr>")
    body = "\n".join(rows)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Deep500 history — {html.escape(metric)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:middle}}
</style></head>
<body><h1>Deep500 history — {html.escape(metric)}</h1>
<p>{len(entries)} configuration(s). Each sparkline is one configuration's
{html.escape(metric)} over every stored run, oldest first, scaled from its lowest to its
highest value; red dots: runs measured under interference; dashed orange lines: steps
of a piecewise-constant fit (asv's method, on the runs without interference). A name
opens the configuration's history page.</p>
<table><tr><th>recipe</th><th>configuration</th><th>history</th><th>runs</th>
<th>latest</th><th>interfered runs</th><th>last step</th></tr>
{body}
</table></body></html>
"""
