"""Per-node forward and backward times (OperatorTimes with backprop), the per-layer
profile, its analytic and learned predictions and their errors."""
import numpy as np
import pytest

import deep500 as d5
import deep500.frameworks.reference as d5ref
from deep500.lv0_operators.cost_model import operator_cost, roofline_time
from deep500.lv1_network.layer_profile import (LayerProfile, analytic_prediction,
                                               calibrated_prediction, compare,
                                               fit_calibration, fit_overhead, kernel_time,
                                               measure_profile, merge_profiles, step_error,
                                               weighted_error)
from deep500.networks import create_model
from deep500.recipe.experiments.networks import make_inputs
from deep500.utils.errors import Deep500Error


@pytest.fixture(scope="module")
def lenet():
    model = create_model("lenet", batch_size=4, loss="softmax_cross_entropy")
    return model, make_inputs(model, 4, 0, 10)


@pytest.mark.parametrize("framework", ["reference", "pytorch"])
def test_backprop_records_forward_and_backward_per_node(lenet, framework):
    model, inputs = lenet
    if framework == "pytorch":
        pytest.importorskip("torch")
        import deep500.frameworks.pytorch as d5pt
        executor = d5pt.from_onnx(model)
    else:
        executor = d5ref.from_onnx(model)
    times = d5.OperatorTimes()
    executor.events.append(times)
    for _ in range(2):
        executor.inference_and_backprop(inputs, "loss")
    summary = times.measure().summary
    assert summary["runs"] == 2 and summary["backward_runs"] == 2
    assert summary["backward_note"] is None
    backward = {e["name"]: e for e in summary["backward_operators"]}
    # Every node that has parameters or lies on the gradient path has a backward time.
    for name in ("conv1", "conv2", "fc1", "fc2", "fc3", "relu1", "pool1"):
        assert backward[name]["median"] > 0, name
    assert backward["conv1"]["op_type"] == "Conv"
    # Forward stays the forward: the same nodes, and backward is not added to it.
    forward = {e["name"] for e in summary["operators"]}
    assert {"conv1", "fc3", "loss/softmax_cross_entropy"} <= forward
    assert summary["total_median"] == pytest.approx(
        sum(e["median"] for e in summary["operators"]), rel=1e-9)  # median of 2 = mean


def test_inference_has_no_backward_and_backward_can_be_off(lenet):
    model, inputs = lenet
    executor = d5ref.from_onnx(model)
    times = d5.OperatorTimes(backward=False)
    executor.events.append(times)
    executor.inference_and_backprop(inputs, "loss")
    summary = times.measure().summary
    assert summary["backward_runs"] == 0 and summary["backward_operators"] == []
    assert "not available" in summary["backward_note"]
    times = d5.OperatorTimes()
    executor.events[:] = [times]
    executor.inference(inputs)
    summary = times.measure().summary
    assert summary["backward_runs"] == 0 and summary["backward_note"] is None


# -- errors and models ---------------------------------------------------------------------


class FakeMachine:
    memory_bandwidth = 1e9

    def peak_flops(self, threads=1, kind="gemm"):
        return 1e10


def test_weighted_and_step_error_by_hand():
    measured = {"a": 3.0, "b": 1.0}
    predicted = {"a": 2.0, "b": 2.0}
    assert weighted_error(predicted, measured) == pytest.approx(2.0 / 4.0)
    assert step_error(predicted, measured) == pytest.approx(0.0)
    with pytest.raises(Deep500Error, match=r"no prediction for nodes \['b'\]"):
        weighted_error({"a": 1.0}, measured)


def _synthetic(name, batch, machine, scale=1.0):
    # Measured = 3x the roofline + 2 µs: a profile with a known answer.
    costs = {}
    for i, n in enumerate((16, 64, 256)):
        cost = operator_cost("Gemm", [(batch, n), (n, n)], [(batch, n)], node=f"fc{i}")
        costs[cost.node] = cost
    relu = operator_cost("Relu", [(batch, 256)], [(batch, 256)], node="relu")
    costs["relu"] = relu
    fwd = {n: 3 * roofline_time(c, machine) + 2e-6 for n, c in costs.items()}
    bwd = {n: 3 * roofline_time(c, machine, direction="backward") + 2e-6
           for n, c in costs.items()}
    return LayerProfile(name, "fake", batch, list(costs), costs, fwd, bwd)


def test_analytic_prediction_and_overhead_on_a_synthetic_profile():
    machine = FakeMachine()
    profile = _synthetic("m", 8, machine)
    overhead = fit_overhead([profile], machine, quantile=0.0)
    smallest = min(profile.costs, key=lambda n: profile.costs[n].forward_bytes)
    assert overhead["forward"] == pytest.approx(profile.forward[smallest])
    pred = analytic_prediction(profile, machine, overhead={"forward": 2e-6, "backward": 2e-6})
    for node, seconds in profile.forward.items():
        assert 3 * (pred["forward"][node] - 2e-6) + 2e-6 == pytest.approx(seconds, rel=1e-9)
    report = compare(profile, pred)
    assert report["forward"]["worst"][0][0] == "fc2"   # the largest layer is furthest off
    assert 0.5 < report["step"]["weighted_error"] < 0.7  # about 2/3 (pred = meas/3)


def test_calibrated_model_recovers_overhead_and_scale():
    machine = FakeMachine()
    train = [_synthetic("m", b, machine) for b in (2, 4, 8, 16)]
    calibration = fit_calibration(train, machine)
    for direction in ("forward", "backward"):
        for op in ("Gemm", "Relu"):
            o, s = calibration[(op, direction)]
            assert o == pytest.approx(2e-6, rel=1e-3, abs=1e-9)
            assert s == pytest.approx(3.0, rel=1e-3)
    test = _synthetic("m", 32, machine)
    report = compare(test, calibrated_prediction(test, machine, calibration))
    assert report["step"]["weighted_error"] < 1e-3
    # An operator type the training never saw takes the all-types fit.
    calibration = {k: v for k, v in calibration.items() if k[0] != "Relu"}
    pred = calibrated_prediction(test, machine, calibration)
    o, s = calibration[("*", "forward")]
    assert pred["forward"]["relu"] == pytest.approx(
        o + s * kernel_time(test.costs["relu"], machine, "forward"), rel=1e-12)


def test_kernel_time_uses_the_measured_gemm_time():
    from deep500.lv0_operators.gemm_rate import GemmRate
    machine = FakeMachine()
    fc = operator_cost("Gemm", [(8, 64), (32, 64)], [(8, 32)], {"transB": 1}, node="fc")
    rate = GemmRate(times={(8, 32, 64): 1e-3, (8, 64, 32): 2e-3, (64, 32, 8): 3e-3})
    assert kernel_time(fc, machine, "forward", gemm_rate=rate) == pytest.approx(1e-3)
    assert kernel_time(fc, machine, "backward", gemm_rate=rate) == pytest.approx(5e-3)
    assert kernel_time(fc, machine, "forward") == pytest.approx(roofline_time(fc, machine))


def test_merge_profiles_takes_the_median_per_node():
    machine = FakeMachine()
    rounds = [_synthetic("m", 8, machine) for _ in range(3)]
    for i, factor in enumerate((1.0, 5.0, 2.0)):
        rounds[i].forward = {n: t * factor for n, t in rounds[i].forward.items()}
    merged = merge_profiles(rounds)
    for node, seconds in rounds[0].forward.items():
        assert merged.forward[node] == pytest.approx(2.0 * seconds, rel=1e-12)
    assert merged.backward == rounds[0].backward
    least = merge_profiles(rounds, statistic="min")
    assert least.forward == rounds[0].forward
    with pytest.raises(Deep500Error, match="statistic must be one of"):
        merge_profiles(rounds, statistic="mean")
    with pytest.raises(Deep500Error, match="not m/fake/batch 8"):
        merge_profiles([rounds[0], _synthetic("m", 16, machine)])


# Batches of the synthetic training profiles: dense enough for trees to interpolate 48.
_TRAIN_BATCHES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 40, 56, 64, 96, 128)


def test_learned_model_recovers_a_smooth_law():
    pytest.importorskip("sklearn")
    from deep500.lv1_network.learned_model import LearnedLayerModel
    machine = FakeMachine()
    train = [_synthetic("m", b, machine) for b in _TRAIN_BATCHES]
    test = _synthetic("m", 48, machine)
    for model in (LearnedLayerModel(), LearnedLayerModel(context=False)):
        report = compare(test, model.fit(train).predict(test))
        assert report["step"]["weighted_error"] < 0.12


def test_per_kernel_mlp_recovers_a_smooth_law_per_operator_type():
    pytest.importorskip("sklearn")
    from deep500.lv1_network.learned_model import LearnedLayerModel
    from deep500.lv1_network.per_kernel_mlp import POOLED, PerKernelMLP
    machine = FakeMachine()
    train = [_synthetic("m", b, machine) for b in _TRAIN_BATCHES]
    test = _synthetic("m", 48, machine)
    model = LearnedLayerModel(regressor="per_kernel_mlp").fit(train)
    # 3 Gemm and 1 Relu node per profile: Gemm gets its own networks, Relu the pooled
    networks = model.models["forward"].networks
    assert set(networks) == {POOLED, "Gemm", "Relu"}
    report = compare(test, model.predict(test))
    assert report["step"]["weighted_error"] < 0.12
    with pytest.raises(Deep500Error, match="regressor must be one of"):
        LearnedLayerModel(regressor="svm")
    with pytest.raises(Deep500Error, match="not trained"):
        PerKernelMLP().predict(np.zeros((1, 2)), ["Gemm"])


def test_learned_model_uses_measured_gemm_times():
    pytest.importorskip("sklearn")
    from deep500.lv0_operators.gemm_rate import GemmRate
    from deep500.lv1_network.learned_model import LearnedLayerModel, features, network_bytes
    machine = FakeMachine()
    train = [_synthetic("m", b, machine) for b in _TRAIN_BATCHES]
    test = _synthetic("m", 48, machine)
    # GEMM times as the fake machine's peak gives them (not timed here: deterministic).
    sizes = {g for p in train + [test] for c in p.costs.values()
             for d in ("forward", "backward") for g in c.gemms(d)}
    rate = GemmRate(times={(m, n, k): 2 * m * n * k / 1e10 for m, n, k in sizes})
    model = LearnedLayerModel(gemm_rate=rate).fit(train)
    assert compare(test, model.predict(test))["step"]["weighted_error"] < 0.12
    cost = test.costs["fc0"]
    plain, full = features(cost, "forward"), features(cost, "forward", 1e6, 1e-6)
    assert len(full) == len(plain) + 5
    assert network_bytes(test, cap=10.0) == 10.0
    with pytest.raises(Deep500Error, match="context_cap_bytes"):
        LearnedLayerModel(context_cap_bytes=0)
    with pytest.raises(Deep500Error, match="ensemble"):
        LearnedLayerModel(ensemble=0)


def test_measure_profile_labels_and_covers_every_timed_node(lenet):
    model, inputs = lenet
    profile = measure_profile(model, d5ref.from_onnx(model), inputs, reruns=1, warmup=0,
                              name="lenet", executor_name="reference", batch=4)
    assert set(profile.forward) == set(profile.order)
    assert set(profile.backward) <= set(profile.order) and "conv1" in profile.backward
    assert profile.costs["conv1"].backward_flops == 2 * profile.costs["conv1"].forward_flops
