"""Per-node forward and backward times (OperatorTimes with backprop), the per-layer
profile, its analytic and learned predictions and their errors."""
import pytest

import deep500 as d5
import deep500.frameworks.reference as d5ref
from deep500.lv0_operators.cost_model import operator_cost, roofline_time
from deep500.lv1_network.layer_profile import (LayerProfile, analytic_prediction, compare,
                                               fit_overhead, measure_profile, step_error,
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


def test_learned_model_recovers_a_smooth_law():
    pytest.importorskip("sklearn")
    from deep500.lv1_network.learned_model import LearnedLayerModel
    machine = FakeMachine()
    train = [_synthetic("m", b, machine) for b in (2, 4, 8, 16, 32, 64, 128)]
    test = _synthetic("m", 48, machine)
    pred = LearnedLayerModel().fit(train).predict(test)
    report = compare(test, pred)
    assert report["step"]["weighted_error"] < 0.15


def test_measure_profile_labels_and_covers_every_timed_node(lenet):
    model, inputs = lenet
    profile = measure_profile(model, d5ref.from_onnx(model), inputs, reruns=1, warmup=0,
                              name="lenet", executor_name="reference", batch=4)
    assert set(profile.forward) == set(profile.order)
    assert set(profile.backward) <= set(profile.order) and "conv1" in profile.backward
    assert profile.costs["conv1"].backward_flops == 2 * profile.costs["conv1"].forward_flops
