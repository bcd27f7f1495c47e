"""Per-node forward and backward times (OperatorTimes with backprop)."""
import pytest

import deep500 as d5
import deep500.frameworks.reference as d5ref
from deep500.networks import create_model
from deep500.recipe.experiments.networks import make_inputs


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
