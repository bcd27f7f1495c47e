"""Epoch times show their spread, and the time to target says how it adds up."""
import statistics

import pytest

from deep500.results.files import read_results
from deep500.report import write_reports
from deep500.report.level2 import to_target_parts
from deep500.report.records import summary
from deep500.report.tables import fmt_time
from tests.report.conftest import copy_run, table


def _measured(run):
    return [r for r in read_results(str(run)) if r["kind"] == "measurement"]


def test_time_to_target_adds_up_from_the_epochs(training_run):
    for record in _measured(training_run):
        parts = to_target_parts(record)
        if not summary(record, "TimeToAccuracy", "reached"):
            assert parts is None
            continue
        epochs = record["result"]["details"]["statistics"]["epochs"]
        walls = [e["wall_time"] for e in epochs[:parts["epochs"]]]
        assert parts["epochs"] == summary(record, "TimeToAccuracy", "epochs")
        # the same total TimeToAccuracy measured, split into first and later epochs ...
        assert parts["total"] == pytest.approx(summary(record, "TimeToAccuracy", "seconds"),
                                               rel=1e-12)
        assert parts["first"] + parts["later"] == pytest.approx(parts["total"], rel=1e-12)
        assert parts["first"] == walls[0]
        # ... and into validation, data loading, steps and the rest
        assert (parts["validation"] + parts["data"] + parts["steps"] + parts["other"]
                == pytest.approx(parts["total"], rel=1e-12))
        assert parts["validation"] == pytest.approx(
            sum(e["validation_time"] for e in epochs[:parts["epochs"]]), rel=1e-12)
        assert parts["other"] >= -1e-9


def test_epoch_spread_and_explanation_per_seed(training_run, tmp_path):
    run = copy_run(training_run, tmp_path / "run")
    write_reports(str(run), per_seed=True)
    markdown = (run / "report.md").read_text()
    header, rows = table(markdown, "Level 2 — training")
    explained_header, explained = table(markdown, "Level 2 — how the time to target adds up")
    for record in _measured(run):
        key = (f"learning_rate={record['configuration']['optimizer']['learning_rate']},",
               f"seed={record['configuration']['seed']}")
        row = next(r for r in rows if key[0] in r[1] and r[2] == key[1])
        times = [e["wall_time"] for e in record["result"]["details"]["statistics"]["epochs"]]
        assert row[header.index("Epoch time (min / median / max)")] == (
            f"{fmt_time(min(times))} / {fmt_time(statistics.median(times))} / "
            f"{fmt_time(max(times))}")
        parts = to_target_parts(record)
        lines = [r for r in explained if key[0] in r[1] and r[2] == key[1]]
        if parts is None:
            assert not lines
            continue
        (line,) = lines
        cell = dict(zip(explained_header, line))
        assert cell["Epochs to target"] == str(parts["epochs"])
        assert cell["Time to target"] == fmt_time(parts["total"])
        assert cell["First epoch"] == fmt_time(parts["first"])
        assert cell["Validation"] == fmt_time(parts["validation"])
    assert "first epoch often takes longer" in markdown


def test_epoch_time_plot_has_whiskers_from_fastest_to_slowest(training_run, tmp_path):
    run = copy_run(training_run, tmp_path / "run")
    write_reports(str(run))
    svg = (run / "plots" / "level2_epoch_time.svg").read_text()
    assert "whiskers: fastest and slowest epoch" in svg
    assert (run / "plots" / "level2_epoch_time.png").stat().st_size > 5000
