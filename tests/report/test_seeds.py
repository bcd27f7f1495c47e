"""Runs of several seeds: one row per configuration with means, Student-t CIs and
MLPerf-style time to target; one row per seed on demand."""
import math
import statistics

import numpy as np
import pytest

from deep500.cli import main
from deep500.results.files import read_results
from deep500.report import write_reports
from deep500.report.records import summary
from deep500.report.seeds import mean_ci, mlperf_score, student_t_quantile, \
    time_to_target_text
from deep500.report.tables import fmt_time
from tests.report.conftest import column, copy_run, svg_legend_texts, table

TRAINING = "Level 2 — training"


@pytest.mark.parametrize("df, quantile", [
    # two-sided 95% critical values of Student's t (NIST/SEMATECH e-Handbook, Table 1.3.6.7.2)
    (1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (30, 2.042),
    (100, 1.984)])
def test_student_t_quantile_matches_the_table(df, quantile):
    assert student_t_quantile(0.975, df) == pytest.approx(quantile, abs=6e-4)
    assert student_t_quantile(0.025, df) == pytest.approx(-quantile, abs=6e-4)


def test_mean_ci_is_the_t_interval():
    values = [9.1, 10.4, 9.7, 10.9]
    mean, low, high = mean_ci(values)
    half = 3.182446305 * statistics.stdev(values) / 2.0
    assert mean == pytest.approx(np.mean(values), rel=1e-12)
    assert (low, high) == pytest.approx((mean - half, mean + half), rel=1e-8)
    single = mean_ci([4.0])
    assert single[0] == 4.0 and math.isnan(single[1]) and math.isnan(single[2])


def test_mlperf_score_drops_fastest_and_slowest():
    assert mlperf_score([3.0, 1.0, 2.0, 10.0, 4.0]) == pytest.approx(3.0)
    # one run that never reached the target counts as the slowest and is dropped
    assert mlperf_score([3.0, 1.0, None, 5.0]) == pytest.approx(4.0)
    assert mlperf_score([3.0, None, None, 5.0]) is None  # invalid
    assert mlperf_score([3.0, 4.0]) is None  # fewer than 3 runs
    text = time_to_target_text([3.0, None, 5.0], 0.9)
    assert "mean of the 2 of 3 runs that reached the target 90%" in text
    assert "MLPerf score 5 s" in text
    assert "more than one run did not reach" in time_to_target_text([3.0, None, None], 0.9)
    assert time_to_target_text([None, None], 0.9) == "not reached (target 90%; 0 of 2 runs)"


def _training(run):
    records = [r for r in read_results(str(run)) if r["kind"] == "measurement"]
    by_rate = {}
    for record in records:
        by_rate.setdefault(record["configuration"]["optimizer"]["learning_rate"],
                           []).append(record)
    return by_rate


def test_seeds_are_aggregated_per_configuration(training_run, tmp_path):
    run = copy_run(training_run, tmp_path / "run")
    write_reports(str(run))
    markdown = (run / "report.md").read_text()
    header, rows = table(markdown, TRAINING)
    assert header[:3] == ["Executor", "Optimizer", "Seeds"]
    assert len(rows) == 2 and all(row[2] == "0, 1, 2" for row in rows)
    for rate, records in _training(run).items():
        assert len(records) == 3
        row = next(r for r in rows if f"learning_rate={rate}," in r[1])
        finals = [summary(r, "TestAccuracy", "final") for r in records]
        mean, low, high = mean_ci(finals)
        assert row[header.index("Final test acc.")] == f"{mean:.1%} ± {(high - low) / 2:.1%}"
        reached = [summary(r, "TimeToAccuracy", "seconds") for r in records
                   if summary(r, "TimeToAccuracy", "reached")]
        cell = row[header.index("Time to target")]
        assert f"of the {len(reached)} of 3 runs that reached the target 80%" in cell
        assert cell.startswith(fmt_time(np.mean(reached)))
    # one series per configuration, drawn as the mean of its seeds
    legend = svg_legend_texts(run / "plots" / "level2_curves.svg")
    assert len(legend) == 2 and all(t.endswith("(mean of 3 seeds)") for t in legend)
    assert len(set(legend)) == 2  # the learning rates tell them apart
    # time to target as bars with the CI over seeds, each saying how many runs reached it
    bars = (run / "plots" / "level2_time_to_target.svg").read_text()
    for records in _training(run).values():
        reached = sum(bool(summary(r, "TimeToAccuracy", "reached")) for r in records)
        assert f"{reached} of 3 runs" in bars


def test_per_seed_rows_on_demand(training_run, tmp_path):
    run = copy_run(training_run, tmp_path / "run")
    assert main(["report", str(run), "--per-seed"]) == 0
    markdown = (run / "report.md").read_text()
    header, rows = table(markdown, TRAINING)
    assert "Seeds" not in header and header[2] == "Settings"
    assert sorted(row[2] for row in rows) == ["seed=0", "seed=0", "seed=1", "seed=1",
                                              "seed=2", "seed=2"]
    assert len({(row[1], row[2]) for row in rows}) == 6
    for record in [r for records in _training(run).values() for r in records]:
        final = summary(record, "TestAccuracy", "final")
        seed = record["configuration"]["seed"]
        rate = record["configuration"]["optimizer"]["learning_rate"]
        row = next(r for r in rows if f"learning_rate={rate}," in r[1] and
                   r[2] == f"seed={seed}")
        assert row[header.index("Final test acc.")] == f"{final:.1%}"
    legend = svg_legend_texts(run / "plots" / "level2_curves.svg")
    assert len(legend) == 6 and len(set(legend)) == 6


def test_a_skipped_configuration_lists_its_seeds(training_run, tmp_path):
    run = copy_run(training_run, tmp_path / "run")
    write_reports(str(run))
    markdown = (run / "report.md").read_text()
    header, rows = table(markdown, "Level 2 — configurations not applicable")
    assert len(rows) == 1 and rows[0][header.index("Seeds")] == "0, 1, 2"
    assert "reference executor's native optimizers" in rows[0][-1]
