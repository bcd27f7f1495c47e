"""FrameworkOverhead and OperatorTimes measured on backprop steps (test_executor_backprop),
on the zoo's transformer (int64 token input) and LSTM, by the reference, PyTorch and
TensorFlow executors."""
import importlib.util

import numpy as np
import pytest

import deep500 as d5
import deep500.frameworks.reference as d5ref
from deep500.networks import create_model
from deep500.recipe.experiments.networks import make_inputs

BATCH = 4


def _model(name):
    model = create_model(name, batch_size=BATCH, loss="softmax_cross_entropy")
    inputs = make_inputs(model, BATCH, 0, 2)   # the zoo's sequence models have 2 classes
    assert inputs["input"].dtype == np.int64
    return model, inputs


@pytest.fixture(scope="module")
def transformer():
    return _model("transformer")


def _executors():
    names = ["reference"]
    if importlib.util.find_spec("torch") is not None:
        names.append("pytorch")
    if importlib.util.find_spec("tensorflow") is not None:
        names.append("tensorflow")
    return names


def _executor(name, model):
    if name == "reference":
        return d5ref.from_onnx(model)
    if name == "tensorflow":
        import deep500.frameworks.tensorflow as d5tf
        return d5tf.from_onnx(model)
    import deep500.frameworks.pytorch as d5pt
    return d5pt.from_onnx(model)


def _nodes(model, op_type):
    return {op.name for op in d5.load_and_parse_model(model).operations
            if op.op_type == op_type}


@pytest.mark.parametrize("framework", _executors())
def test_backprop_overhead_counts_forward_and_backward_operators(transformer, framework):
    model, inputs = transformer
    executor = _executor(framework, model)
    reruns, warmup = 3, 1
    times, overhead = d5.OperatorTimes(), d5.FrameworkOverhead(reruns=reruns, warmup=warmup)
    result = d5.test_executor_backprop(executor, inputs, metrics=[times, overhead])
    summary = result["FrameworkOverhead"].summary
    assert result["FrameworkOverhead"].warnings == []
    assert summary["overhead"] is not None and summary["backward_operators"] > 0
    # Operators (forward and backward) run inside the timed call: every sample's
    # overhead is a share in [0, 1), and the network time exceeds the operator time.
    samples = result["FrameworkOverhead"].samples
    assert len(samples) == reruns and all(0.0 <= s < 1.0 for s in samples)
    assert summary["network"] > summary["operators"] > summary["backward_operators"]
    # The backward part is what OperatorTimes reports per node, summed per run.
    op_summary = result["OperatorTimes"].summary
    assert op_summary["backward_runs"] == reruns + warmup
    assert op_summary["backward_note"] is None
    backward = {o["name"]: o for o in op_summary["backward_operators"]}
    # Forward and backward per node for every LayerNormalization of the encoder.
    layer_norms = _nodes(model, "LayerNormalization")
    assert len(layer_norms) == 5
    for name in layer_norms:
        assert backward[name]["op_type"] == "LayerNormalization"
        assert backward[name]["median"] > 0
    forward = {o["name"] for o in op_summary["operators"]}
    assert layer_norms <= forward
    assert op_summary["backward_total_median"] > 0
    assert len(backward) > len(layer_norms)   # the other nodes' backward, too


def test_backprop_overhead_of_the_reference_executor_matches_its_parts(transformer):
    """overhead = 1 − (forward + backward operator time) / network time, run by run."""
    model, inputs = transformer
    executor = d5ref.from_onnx(model)
    overhead = d5.FrameworkOverhead(reruns=2, warmup=0)
    result = d5.test_executor_backprop(executor, inputs, metrics=[overhead])
    times = overhead.operator_times
    network = [s * 1e-9 for s in overhead._samples]
    expected = [1.0 - (f + b) / n
                for f, b, n in zip(times.totals(), times.backward_totals, network)]
    np.testing.assert_allclose(result["FrameworkOverhead"].samples, expected, rtol=1e-12)


@pytest.mark.parametrize("framework", _executors())
def test_lstm_backward_is_timed_per_node(framework):
    model, inputs = _model("lstm")
    result = d5.test_executor_backprop(_executor(framework, model), inputs,
                                       metrics=[d5.OperatorTimes(),
                                                d5.FrameworkOverhead(2, 0)])
    backward = {o["op_type"]: o["median"]
                for o in result["OperatorTimes"].summary["backward_operators"]}
    assert backward["LSTM"] > 0 and backward["Gemm"] > 0
    assert 0.0 <= result["FrameworkOverhead"].summary["overhead"] < 1.0
