"""Level-1 validation functions and white-box metrics."""
import json

import numpy as np
import pytest

import deep500 as d5
import deep500.frameworks.onnxruntime as d5ort
import deep500.frameworks.reference as d5ref
from deep500.networks import create_model
from deep500.recipe.experiments.networks import make_inputs
from deep500.utils.errors import Deep500Error


@pytest.fixture(scope="module")
def lenet():
    model = create_model("lenet", batch_size=4, loss="softmax_cross_entropy")
    return model, make_inputs(model, 4, 0, 10)


def test_inference_validation_with_operator_breakdown(lenet):
    model, inputs = lenet
    executor = d5ref.from_onnx(model)
    reference = executor.inference(inputs)
    metrics = [d5.WallclockTime(reruns=4, warmup=1), d5.OperatorTimes(),
               d5.FrameworkOverhead(reruns=4, warmup=1), d5.L2Error(), d5.PeakMemory()]
    result = d5.test_executor_inference(executor, inputs, reference, metrics)
    assert executor.events == []  # metrics were installed for the test only
    times = result["OperatorTimes"].summary
    node_names = [op.name for op in d5.load_and_parse_model(model).operations]
    assert times["runs"] == 5  # max(reruns + warmup) runs, every one recorded
    assert {o["name"] for o in times["operators"]} <= set(node_names)
    assert "Conv" in times["by_op_type"] and times["total_median"] > 0
    # Shares are per-operator medians over the median total: about, not exactly, 1.
    assert 0.5 < sum(o["share"] for o in times["operators"]) < 1.5
    # Operators are part of the whole run (warm-up runs included in neither bound).
    assert min(result["OperatorTimes"].samples) <= max(result["WallclockTime"].samples)
    overhead = result["FrameworkOverhead"].summary["overhead"]
    assert min(result["FrameworkOverhead"].samples) >= 0.0 and overhead < 1.0
    assert result["L2Error"].summary["relative"] == 0.0
    assert result["PeakMemory"].summary["peak_bytes"] > 0
    json.dumps(result.to_dict())
    assert result.conditions["framework"] == "reference"


def test_backprop_validation_compares_gradients(lenet):
    model, inputs = lenet
    executor = d5ref.from_onnx(model)
    expected = executor.inference_and_backprop(inputs, "loss")
    params = executor.network.get_params()
    reference = {p: expected[d5.gradient_name(p)] for p in params}
    result = d5.test_executor_backprop(executor, inputs, reference, "loss",
                                       metrics=[d5.MaxError(), d5.FrameworkOverhead(2, 0)])
    assert result["MaxError"].summary["relative"] == 0.0
    assert len(result["MaxError"].summary["per_output"]) == len(params)
    # Forward and backward operators are timed one by one: the rest is overhead.
    assert 0.0 <= result["FrameworkOverhead"].summary["overhead"] < 1.0
    wrong = dict(reference)
    wrong[params[0]] = wrong[params[0]] * 1.5
    worse = d5.test_executor_backprop(executor, inputs, wrong, metrics=[d5.L2Error()])
    assert worse["L2Error"].summary["relative"] > 0.1


def test_onnxruntime_operator_times_come_from_its_profiler(lenet):
    model, inputs = lenet
    executor = d5ort.from_onnx(create_model("lenet", batch_size=4))
    result = d5.test_executor_inference(executor, {"input": inputs["input"]},
                                        metrics=[d5.OperatorTimes()])
    summary = result["OperatorTimes"].summary
    assert summary["runs"] >= 1 and summary["total_median"] > 0
    assert any("Conv" in t for t in summary["by_op_type"])


def test_accuracy_metric_without_reference_is_an_error(lenet):
    model, inputs = lenet
    with pytest.raises(Deep500Error, match="got none"):
        d5.test_executor_inference(d5ref.from_onnx(model), inputs, metrics=[d5.L2Error()])
    with pytest.raises(Deep500Error, match="inference only"):
        d5ort.from_onnx(model).inference_and_backprop(inputs, "loss")


def test_peak_memory_by_tracing_runs_apart_from_timers(lenet):
    model, inputs = lenet
    executor = d5ref.from_onnx(model)
    calls = {"n": 0}
    original = executor.inference

    def counting(feed):
        calls["n"] += 1
        return original(feed)

    executor.inference = counting
    result = d5.test_executor_inference(
        executor, inputs, metrics=[d5.WallclockTime(reruns=3, warmup=0),
                                   d5.PeakMemory("tracemalloc")])
    assert calls["n"] == 4  # one traced run of its own + three timed runs
    assert result["PeakMemory"].summary["method"] == "tracemalloc"
    assert result["PeakMemory"].summary["peak_bytes"] > 0
    import tracemalloc
    assert not tracemalloc.is_tracing()
