"""What a row says about how far to trust it: reruns and warm-up, a wide CI, other
processes interfering (telemetry written by the runner's sampler), re-measurements."""
import json

from deep500.results.files import read_results
from deep500.report import write_reports
from deep500.report.records import flags, summary
from tests.report.conftest import column, copy_run, table

LEVEL0 = "Level 0 — operators"


def _rewrite(run, change):
    """Apply ``change(index, record)`` to every record of the run folder, after taking
    out what the telemetry sampler wrote (this machine may have been busy), so every
    flag seen is one the test put there."""
    records = read_results(str(run))
    for index, record in enumerate(records):
        for key in ("telemetry", "telemetry_series", "telemetry_attempts", "remeasured"):
            record.pop(key, None)
        change(index, record)
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def test_reruns_and_warmup_are_shown(operators_run, tmp_path):
    run = copy_run(operators_run, tmp_path / "run")
    write_reports(str(run))
    records = read_results(str(run))
    assert all(summary(r, "WallclockTime", "n") == 8 for r in records)
    assert all(summary(r, "WallclockTime", "warmup") == 2 for r in records)
    reruns = column((run / "report.md").read_text(), LEVEL0, "Reruns")
    assert reruns == ["8 (+2 warm-up)"] * 16


def test_wide_ci_is_flagged_on_its_row(operators_run, tmp_path):
    run = copy_run(operators_run, tmp_path / "run")

    def widen(index, record):
        wall = next(m for m in record["result"]["metrics"] if m["metric"] == "WallclockTime")
        wall["warnings"] = []
        if index == 0:
            wall["summary"]["ci_relative_width"] = 0.25
        else:
            wall["summary"]["ci_relative_width"] = 0.01
    _rewrite(run, widen)
    write_reports(str(run))
    cells = column((run / "report.md").read_text(), LEVEL0, "Flags")
    assert cells[0] == "⚠ wide CI: 25% of the median"
    assert cells[1:] == ["—"] * 15
    # the recipe's own threshold decides
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["recipe"]["content"]["metrics"]["WallclockTime"]["ci_warn_fraction"] = 0.5
    (run / "manifest.json").write_text(json.dumps(manifest))
    write_reports(str(run))
    assert column((run / "report.md").read_text(), LEVEL0, "Flags") == ["—"] * 16


def test_interference_and_remeasurement_are_flagged(operators_run, tmp_path):
    run = copy_run(operators_run, tmp_path / "run")
    reason = ("other processes used 0.93 CPU cores on average, more than the 0.50 allowed "
              "(margin 0.10 for a 0.20 s window); CPU frequency fell 30% during the window "
              "(1400–2000 MHz; threshold 20%)")

    def telemetry(index, record):
        wall = next(m for m in record["result"]["metrics"] if m["metric"] == "WallclockTime")
        wall["warnings"], wall["summary"]["ci_relative_width"] = [], 0.01
        if index == 0:
            record["telemetry"] = {"interfered": True, "reason": reason,
                                   "other_cpu_cores": 0.93, "own_cpu_cores": 1.0}
            record["remeasured"] = 2
        elif index == 1:
            record["telemetry"] = {"interfered": False, "reason": None,
                                   "other_cpu_cores": 0.01}
            record["remeasured"] = 0
        # the others carry no telemetry, as records written before the sampler
    records = _rewrite(run, telemetry)
    write_reports(str(run))
    cells = column((run / "report.md").read_text(), LEVEL0, "Flags")
    assert cells[0] == ("⚠ interference: other processes used 0.93 cores; CPU frequency "
                        "fell 30% during the window (1400–2000 MHz; threshold 20%); "
                        "re-measured 2×")
    assert cells[1:] == ["—"] * 15
    assert flags(records[2]) == "—"
    html = (run / "report.html").read_text()
    assert "⚠ interference: other processes used 0.93 cores" in html


def test_too_few_samples_for_a_ci(operators_run, tmp_path):
    record = read_results(str(operators_run))[0]
    record.pop("telemetry", None)  # what the sampler saw on this (shared) machine
    record.pop("remeasured", None)
    wall = next(m for m in record["result"]["metrics"] if m["metric"] == "WallclockTime")
    wall["summary"].update(n=3, ci_low=None, ci_high=None, ci_relative_width=None)
    assert flags(record) == "⚠ no CI: 3 samples are too few"


def test_flags_in_the_training_table(training_run, tmp_path):
    run = copy_run(training_run, tmp_path / "run")

    def interfere(index, record):
        if record["kind"] == "measurement" and record["configuration"]["seed"] == 1:
            record["telemetry"] = {"interfered": True, "reason": None,
                                   "other_cpu_cores": 1.5}
    _rewrite(run, interfere)
    write_reports(str(run))
    header, rows = table((run / "report.md").read_text(), "Level 2 — training")
    assert [row[header.index("Flags")] for row in rows] == [
        "seed 1: ⚠ interference: other processes used 1.5 cores"] * 2
