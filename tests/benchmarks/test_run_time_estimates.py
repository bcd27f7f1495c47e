"""benchmarks/run_time_estimates.py: each benchmark's expected run time grows with the
work its arguments ask for, and its basis names the counts it multiplied."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks"))
import run_time_estimates as estimates  # noqa: E402


def _grows(make, **more):
    """The estimate of ``make()`` and of ``make(**more)``: the second is larger."""
    base, bigger = make(), make(**more)
    assert bigger.seconds > base.seconds > 0, (base, bigger)
    return base, bigger


def test_layer_models_scale_with_rounds_profiles_and_evaluations():
    def make(rounds=5, networks=15, evaluated=3):
        return estimates.lv1_layer_models(networks, evaluated, 3, 2, rounds, 7, 2)
    base, doubled = _grows(make, rounds=10)
    fits = 6 * estimates.LAYER_MODEL_FIT_S
    assert doubled.seconds - fits == pytest.approx(2 * (base.seconds - fits))
    _grows(make, networks=30)
    _grows(make, evaluated=4)
    assert "5 rounds x 90 profiles x 9 passes" in base.basis
    assert "6 evaluations" in base.basis


def test_training_overhead_scales_with_epochs_rows_and_samples():
    def make(samples=19200, rows=5, rounds=10, tiny=2000, adam=2):
        return estimates.lv2_training_overhead("lenet", samples, 128, rows, rounds, tiny,
                                               adam, 0.1, 10.0)
    for more in ({"samples": 38400}, {"rows": 6}, {"rounds": 20}, {"tiny": 4000},
                 {"adam": 3}):
        _grows(make, **more)
    assert make(tiny=None).seconds < make().seconds
    assert "tiny-MLP row none" in make(tiny=None).basis
    assert "differs" in estimates.lv2_training_overhead("resnet20", 1280, 128, 1, 2, None,
                                                        0, 0.1, 10.0).basis


def test_distributed_benchmarks_scale_with_their_work():
    _grows(lambda repeats=7: estimates.lv3_cluster_links(125e6, 1 << 23, repeats),
           repeats=14)
    slow_link = estimates.lv3_cluster_links(12.5e6, 1 << 23, 7)
    assert slow_link.seconds > estimates.lv3_cluster_links(125e6, 1 << 23, 7).seconds
    _grows(lambda sizes=8: estimates.lv3_cpp_allreduce(sizes, 11, 100.0), sizes=9)
    cold = estimates.lv3_cpp_allreduce(8, 11, 100.0)
    assert cold.at_most > cold.seconds
    _grows(lambda models=("mlp",): estimates.lv3_overlap(list(models), 1, 1, 3, 40, 16,
                                                         False), models=("mlp", "wide"))
    _grows(lambda steps=40: estimates.lv3_overlap(["mlp"], 1, 1, 3, steps, 16, False),
           steps=80)
    _grows(lambda calibrate=False: estimates.lv3_overlap(["mlp"], 1, 1, 3, 40, 16,
                                                         calibrate), calibrate=True)
    _grows(lambda steps=20: estimates.lv3_scaling("mlp", 64, steps, 9, 2), steps=40)
    _grows(lambda batch=64: estimates.lv3_scaling("mlp", batch, 20, 9, 2), batch=128)


def test_simulator_sweep_and_report_scale_with_their_work():
    def simulator(rounds=5, algorithms=7, calibrate=True):
        return estimates.lv3_simulator(2, algorithms, 3, rounds, calibrate, quick=False)
    for more in ({"rounds": 6}, {"algorithms": 8}, {"calibrate": True}):
        _grows(lambda **kw: simulator(**{"calibrate": False, **kw}), **more)
    assert estimates.lv3_simulator(1, 2, 1, 1, True, quick=True).seconds < \
        simulator().seconds
    _grows(lambda rates=1: estimates.predict_sweep_check(rates, 3, True), rates=3)
    _grows(lambda epochs=1: estimates.predict_sweep_check(3, epochs, False), epochs=3)
    _grows(lambda records=1000: estimates.report_scaling(records), records=100_000)
    assert "100000 records" in estimates.report_scaling(100_000).basis
