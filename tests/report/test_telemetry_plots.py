"""The level-3 report's per-rank telemetry figures (deep500.report.telemetry_plots):
one figure per configuration, one series per rank, on the ranks' common time axis."""
import copy
from pathlib import Path

import pytest

from deep500.report import level3
from deep500.report.telemetry_plots import rank_series, telemetry_plots
from tests.report.conftest import read_jsonl, svg_legend_texts


def _series(start, own, rss, sent=None):
    n = len(own)
    series = {"started_unix": start, "t": [0.1 * (i + 1) for i in range(n)],
              "own_cpu_cores": own, "rss_bytes": rss, "threads": [3] * n,
              "voluntary_per_s": [10.0] * n, "involuntary_per_s": [2.0] * n}
    if sent is not None:
        series["probes"] = {"communication.bytes_sent": sent,
                            "communication.bytes_received": sent}
    return series


def test_ranks_share_one_time_axis_and_panels_are_in_their_units():
    records = [{"index": 0, "rank": 0, "telemetry_series": _series(
                   1000.0, [0.5, 1.0], [1 << 20, 2 << 20], [None, 4e6])},
               {"index": 0, "rank": 1, "telemetry_series": _series(
                   1000.25, [0.25, 0.75], [3 << 20, 3 << 20], [2e6, 2e6])}]
    per_rank = rank_series(records)
    xs0, (cpu0, rss0, threads0, switches0, traffic0) = per_rank[0]
    xs1, (cpu1, _, _, _, traffic1) = per_rank[1]
    assert xs0 == pytest.approx([0.1, 0.2]) and xs1 == pytest.approx([0.35, 0.45])
    assert cpu0 == [50.0, 100.0] and cpu1 == [25.0, 75.0]
    assert rss0 == [1.0, 2.0] and threads0 == [3, 3] and switches0 == [12.0, 12.0]
    assert traffic0 == [0.0, 8.0] and traffic1 == [4.0, 4.0]  # MB/s, sent + received


def test_records_without_series_draw_nothing(tmp_path):
    records = [{"index": 0, "rank": 0}, {"index": 0, "rank": 1, "telemetry_series": {}}]
    assert telemetry_plots(records, str(tmp_path), lambda r: "x", None) == []


def test_the_level3_report_has_a_telemetry_figure_per_configuration(distributed_run):
    records = read_jsonl(distributed_run / "results.jsonl")
    for record in records:
        if record["kind"] == "measurement":
            rank = record["rank"]
            record["telemetry_series"] = _series(
                100.0 + rank, [0.9, 1.0, 0.8], [50 << 20] * 3, [1e6, 2e6, 1e6])
    measured = [r for r in records if r["kind"] == "measurement"]
    section = level3.build(copy.deepcopy(records), str(distributed_run))
    figures = [path for caption, path in section["plots"] if "telemetry" in path]
    assert len(figures) == len({r["index"] for r in measured})
    svg = figures[0].replace(".png", ".svg")
    assert sorted(svg_legend_texts(Path(svg))) == ["rank 0", "rank 1"]
