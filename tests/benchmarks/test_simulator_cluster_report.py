"""The verdict of ``benchmarks/lv3_simulator.py --cluster`` from rows whose answer is
known: repeatability over rounds, the steal rule (rounds on a disturbed host left out
of the last line when every configuration keeps a quiet one), and the last line."""

import pytest


@pytest.fixture
def report_module(repo_root, monkeypatch):
    monkeypatch.syspath_prepend(str(repo_root / "benchmarks"))
    import simulator_cluster_report
    return simulator_cluster_report


def _round(predicted, measured, steal):
    parts = {"step_s": predicted, "compute_s": predicted / 2, "communication_s": 0.0,
             "exposed_communication_s": 0.0, "straggler_s": 0.0, "update_s": 0.0}
    return {"measured_s": measured, "predicted": parts,
            "predicted_by_calibration": {"quick": predicted}, "steal": steal}


def _row(model, rounds):
    return {"nodes": 2, "model": model, "mode": "blocking", "wire": "fp32",
            "rate": "1gbit", "rounds": rounds}


def test_rounds_over_the_steal_limit_leave_the_last_line(report_module, capsys):
    # Each configuration: two quiet rounds predicted exactly, one disturbed round
    # (20% steal) measured 50% slower.
    rows = [_row(f"m{i}", [_round(0.1 * i, 0.1 * i, 0.0), _round(0.1 * i, 0.15 * i, 0.2),
                           _round(0.1 * i, 0.1 * i, 0.01)]) for i in (1, 2, 3)]
    assert report_module.report(rows, cores=2) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "simulator step-time error: median 0.0%, worst 0.0%, ranking tau 1.00"
    assert any("3 of 9 measurements above 5%" in line for line in out)
    assert any(line.startswith("# repeatability:") and "worst 50.0%" in line
               for line in out)


def test_a_configuration_without_a_quiet_round_keeps_every_round(report_module, capsys):
    rows = [_row("a", [_round(0.1, 0.1, 0.0), _round(0.1, 0.1, 0.0), _round(0.1, 0.1, 0.0)]),
            _row("b", [_round(0.2, 0.25, 0.3), _round(0.2, 0.25, 0.3), _round(0.2, 0.2, 0.3)])]
    assert report_module.report(rows, cores=2) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert any("no round under the steal limit" in line for line in out)
    # b's ratios 0.8, 0.8, 1.0: median 0.8, error 20%; a's 0%
    assert out[-1] == "simulator step-time error: median 10.0%, worst 20.0%, ranking tau 1.00"
