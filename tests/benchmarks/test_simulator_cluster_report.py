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


def test_the_diagnostic_at_the_runs_speed_covers_the_rows_with_a_network(report_module,
                                                                        capsys):
    one = _row("m", [_round(0.1, 0.1, 0.0)])
    one["nodes"] = 1
    two = _row("m", [{**_round(0.1, 0.12, 0.0), "predicted_at_run_speed_s": 0.12,
                      "run_compute_s": 0.06}])
    assert report_module.report([one, two], cores=2) == 0
    out = capsys.readouterr().out.strip().splitlines()
    # the run computed 0.06 s where the profile had 0.05 s: 1.20
    assert any("2 node(s) 1.20 (1.20-1.20)" in line for line in out)
    line = next(line for line in out if line.startswith("# at the runs' own compute speed"))
    assert "1 configurations, median 0.0%, worst 0.0%" in line


def test_a_profile_at_the_runs_speed_lasts_what_the_run_computed(repo_root, monkeypatch):
    monkeypatch.syspath_prepend(str(repo_root / "benchmarks"))
    from simulator_cluster import at_run_speed
    from deep500.lv3_distributed.step_profile import LayerTime, StepProfile
    profile = StepProfile("p", 8, 1, [LayerTime("a", "Gemm", 1e-3, 2e-3, 4000),
                                      LayerTime("b", "Relu", 1e-3, 1e-3)],
                          other_compute_s=1e-3, update_s=0.5e-3, step_samples=[7e-3, 8e-3])
    faster = at_run_speed(profile, 3e-3)
    assert faster.compute_s == pytest.approx(3e-3, rel=1e-12)
    assert faster.update_s == pytest.approx(0.25e-3, rel=1e-12)
    assert faster.step_samples == pytest.approx([3.5e-3, 4e-3], rel=1e-12)
    assert faster.gradient_bytes == 4000
    assert at_run_speed(profile, None) is None
