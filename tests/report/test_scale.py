"""Reports of many records: records streamed and kept small, long tables cut with the
whole table written beside the report, bar charts capped (what was left out said),
and one series per seed folded into the mean over seeds where it would be too many.
The time and memory at 100k records are measured by benchmarks/report_scaling.py."""
import copy
import csv
import json
import math

import pytest

from deep500.cli import main
from deep500.report import pages, plots, write_reports
from deep500.report.reading import report_records
from deep500.report.records import Settings, summary
from deep500.report.seeds import mean_ci
from deep500.report.time_bars import RecordGrid
from deep500.results.files import read_results
from tests.report.conftest import read_jsonl, svg_legend_texts, table

CONFIGURATIONS, SEEDS = 30, 15


def _many_records(source, folder, configurations=CONFIGURATIONS, seeds=SEEDS):
    """``configurations`` × ``seeds`` records made from the operators run's Relu and
    Gemm records on the reference framework (one operator shape per configuration),
    with the run's manifest; returns the records written."""
    templates = [r for r in read_jsonl(source / "results.jsonl")
                 if r["configuration"]["framework"] == "reference"
                 and r["configuration"]["threads"] == 1 and r["configuration"]["seed"] == 0]
    assert len(templates) == 2
    records = []
    for number in range(configurations):
        template = templates[number % 2]
        for seed in range(seeds):
            record = copy.deepcopy(template)
            operator = record["configuration"]["operator"]
            operator["label"] = f"{operator['op_type']} #{number}"
            operator["input_shapes"][0][0] += number
            record["configuration"]["threads"] = 1
            record["configuration"]["seed"] = seed
            record["index"] = len(records)
            wall = next(m for m in record["result"]["metrics"]
                        if m["metric"] == "WallclockTime")
            factor = 1.0 + 0.01 * seed + number
            for field in ("median", "ci_low", "ci_high"):
                wall["summary"][field] *= factor
            flops = next(m for m in record["result"]["metrics"] if m["metric"] == "FLOPs")
            if flops["summary"].get("gflops_per_s") is not None:
                flops["summary"]["gflops_per_s"] /= factor
            for entry in record["result"]["metrics"]:
                entry["warnings"] = []
            wall["warnings"] = [f"noisy: configuration {number}, seed {seed}"]
            records.append(record)
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    manifest = json.loads((source / "manifest.json").read_text())
    manifest["recipe"]["content"]["mutable"] = {"seed": list(range(seeds))}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return records


@pytest.fixture
def small_caps(monkeypatch):
    monkeypatch.setattr(pages, "MAX_ROWS", 50)
    monkeypatch.setattr(pages, "MAX_WARNINGS", 5)
    monkeypatch.setattr(plots, "MAX_GROUPS", 10)


def test_a_long_table_shows_its_first_rows_and_is_written_whole(operators_run, tmp_path,
                                                                small_caps):
    run = tmp_path / "run"
    records = _many_records(operators_run, run)
    write_reports(str(run))
    markdown = (run / "report.md").read_text()
    header, rows = table(markdown, "Level 0 — operators")
    assert len(rows) == 50
    total = CONFIGURATIONS * SEEDS
    assert (f"Rows 1 to 50 of {total} shown, in the order measured; all {total} rows are "
            f"in tables/level-0-operators.csv.") in markdown
    with open(run / "tables" / "level-0-operators.csv", newline="") as handle:
        written = list(csv.reader(handle))
    assert written[0] == header and len(written) == total + 1
    assert [row[0] for row in written[1:]] == [
        r["configuration"]["operator"]["label"] for r in records]
    assert [row[:2] for row in written[1:51]] == [row[:2] for row in rows]
    assert "Rows 1 to 50" in (run / "report.html").read_text()


def test_many_warnings_are_listed_in_a_file(operators_run, tmp_path, small_caps):
    run = tmp_path / "run"
    records = _many_records(operators_run, run)
    write_reports(str(run))
    markdown = (run / "report.md").read_text()
    listed = markdown.split("**Measurement warnings**", 1)[1].lstrip("\n").split("\n\n")[0]
    lines = listed.splitlines()
    assert len(lines) == 6 and all(line.startswith("- ") for line in lines)
    assert lines[0] == "- Relu #0 on reference · seed=0: noisy: configuration 0, seed 0"
    assert lines[-1] == (f"- ... and {len(records) - 5} more ({len(records)} in all, in "
                         f"tables/level-0-operators-warnings.txt)")
    written = (run / "tables" / "level-0-operators-warnings.txt").read_text().splitlines()
    assert len(written) == len(records) and written[:5] == [line[2:] for line in lines[:5]]


def test_seeds_beyond_a_charts_series_are_folded(operators_run, tmp_path, small_caps):
    run = tmp_path / "run"
    _many_records(operators_run, run)
    write_reports(str(run))
    svg = (run / "plots" / "level0_time.svg").read_text()
    assert svg_legend_texts(run / "plots" / "level0_time.svg") == ["reference"]
    assert "mean over seeds of the median, 95% CI over seeds" in svg
    assert "the first 10 of 30 groups shown" in svg
    markdown = (run / "report.md").read_text()
    assert ("![Time per operator and framework (the first 10 of 30 groups shown, in the "
            "order measured; the table has them all)]") in markdown


def test_one_series_per_seed_on_demand_is_capped(operators_run, tmp_path, small_caps):
    run = tmp_path / "run"
    _many_records(operators_run, run)
    write_reports(str(run), per_seed=True)
    legend = svg_legend_texts(run / "plots" / "level0_time.svg")
    assert legend == [f"reference · seed={s}" for s in range(plots.MAX_SERIES)]
    svg = (run / "plots" / "level0_time.svg").read_text()
    assert f"the first {plots.MAX_SERIES} of {SEEDS} series shown" in svg
    # fewer groups where there are many series: at most MAX_BARS bars
    assert f"the first {plots.group_cap(SEEDS)} of 30 groups" in svg


def test_a_folded_bar_is_the_mean_over_seeds_with_their_t_interval(operators_run,
                                                                    tmp_path):
    run = tmp_path / "run"
    records = _many_records(operators_run, run, configurations=2, seeds=4)
    settings = Settings(records, ("operator", "framework"), aggregated=("seed",))
    grid = RecordGrid(records, lambda r: r["configuration"]["operator"]["label"],
                      lambda r: settings.label(r["configuration"]["framework"], r))
    assert grid.folded and grid.series == ["reference"] and len(grid.groups) == 2
    for index, group in enumerate(grid.groups):
        medians = [summary(r, "WallclockTime", "median") for r in records
                   if r["configuration"]["operator"]["label"] == group]
        mean, low, high = mean_ci(medians)
        assert math.isclose(grid.values("WallclockTime", "median")["reference"][index],
                            mean)
        assert grid.seed_cis("WallclockTime", "median")["reference"][index] == (low, high)


def test_records_are_kept_without_what_no_section_reads(operators_run):
    full = read_results(str(operators_run))
    kept = report_records(str(operators_run))
    assert len(kept) == len(full)
    for before, after in zip(full, kept):
        assert "threads" not in after and "telemetry_series" not in after
        assert set(after["telemetry"]) <= {"interfered", "other_cpu_cores", "reason"}
        assert "conditions" not in after["result"]
        assert [m["summary"] for m in after["result"]["metrics"]] == [
            m["summary"] for m in before["result"]["metrics"]]
        assert all("conditions" not in m for m in after["result"]["metrics"])
        # only WallclockTime's samples, as quantiles (test_distribution_plots.py)
        assert [m["metric"] for m in after["result"]["metrics"] if "samples" in m] == [
            "WallclockTime"]
        assert after["configuration"] == before["configuration"]
    # equal keys and short texts are one object across records
    assert kept[0]["result"]["metrics"][0]["metric"] is kept[1]["result"]["metrics"][0][
        "metric"]


def test_trajectory_samples_and_level3_series_are_kept(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    record = {"kind": "measurement", "level": 3, "index": 0, "configuration": {},
              "telemetry_series": {"t": [0.0, 1.0]},
              "result": {"metrics": [{"metric": "TrajectoryDivergence", "summary": {},
                                      "samples": [{"step": 1}], "conditions": {}}]}}
    (run / "results.jsonl").write_text(json.dumps(record) + "\n")
    kept = report_records(str(run))[0]
    assert kept["telemetry_series"] == {"t": [0.0, 1.0]}
    assert kept["result"]["metrics"][0]["samples"] == [{"step": 1}]
    assert "conditions" not in kept["result"]["metrics"][0]


def test_a_bad_line_amid_many_is_named(operators_run, tmp_path, capsys):
    run = tmp_path / "run"
    _many_records(operators_run, run, configurations=2, seeds=3)
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    lines[2] = '{"kind": "measurement", "cut\n'
    (run / "results.jsonl").write_text("".join(lines))
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "line(s) 3 are not results" in err and "5 of 6 lines are" in err
    assert "Traceback" not in err
