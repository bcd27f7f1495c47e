"""The report's table of timeline files: each configuration's Chrome traces (the
``Timeline`` metric's one file per rank, and every rank's on one clock), linked for
opening in ui.perfetto.dev or ``chrome://tracing``."""
from __future__ import annotations

import os
from typing import Callable

from deep500.report.tables import Links, Table


def timeline_summary(record: dict) -> dict | None:
    """The ``Timeline`` metric's summary in ``record``, if it wrote files."""
    for metric in (record.get("result") or {}).get("metrics", []):
        if metric.get("metric") == "Timeline" and (metric.get("summary") or {}).get("path"):
            return metric["summary"]
    return None


def _in_run_folder(path: str) -> str:
    """``timeline/<file>``: the file's place in the run folder, wherever it was when
    written (a run folder can be moved or copied before its report is rebuilt)."""
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))


def timeline_links(summary: dict) -> Links:
    """Links to every rank's file (with several ranks, first) and each rank's."""
    per_rank = summary.get("rank_paths") or []
    items = [(f"rank {r}", _in_run_folder(p)) for r, p in enumerate(per_rank)]
    if summary["path"] not in per_rank:
        items.insert(0, ("all ranks", _in_run_folder(summary["path"])))
    return Links(tuple(items))


def timelines_table(records: list[dict], heads: list[str],
                    head: Callable[[dict], list]) -> Table:
    """One row per record with timeline files: ``head(record)`` (under ``heads``) and
    the links."""
    table = Table("Timelines (phase events per rank, Chrome trace format)",
                  [*heads, "Files"], note=(
                      "Open a file in https://ui.perfetto.dev or chrome://tracing: one "
                      "row per rank and lane (compute, communication, buckets). 'all "
                      "ranks' puts every rank on one clock (aligned by two barriers)."))
    for record in records:
        summary = timeline_summary(record)
        if summary is not None:
            table.rows.append([*head(record), timeline_links(summary)])
    return table
