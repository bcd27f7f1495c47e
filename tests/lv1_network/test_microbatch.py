"""Micro-batching convolutions (Oyama et al., CLUSTER 2018) keeps outputs and gradients
and lowers the reference executor's peak memory."""
import numpy as np
import pytest

import deep500 as d5
import deep500.frameworks.reference as d5ref
from deep500.lv1_network.transformations import microbatch_convolutions
from deep500.networks import create_model
from deep500.recipe.experiments.networks import make_inputs
from deep500.utils.errors import Deep500Error

BATCH = 8


@pytest.fixture(scope="module")
def lenet():
    return create_model("lenet", batch_size=BATCH, loss="softmax_cross_entropy")


def test_graph_is_rewritten_per_convolution(lenet):
    transformed = microbatch_convolutions(lenet, micro_batch=3)
    convs = [n for n in lenet.graph.node if n.op_type == "Conv"]
    new_convs = [n for n in transformed.graph.node if n.op_type == "Conv"]
    assert len(new_convs) == 3 * len(convs)  # 8 = 3 + 3 + 2
    splits = [n for n in transformed.graph.node if n.op_type == "Split"]
    assert len(splits) == len(convs)
    sizes = {init.name: list(np.frombuffer(init.raw_data, np.int64))
             for init in transformed.graph.initializer if init.name.endswith("_sizes")}
    assert all(s == [3, 3, 2] for s in sizes.values())


def test_outputs_gradients_same_and_peak_memory_lower(lenet):
    inputs = make_inputs(lenet, BATCH, 0, 10)
    original = d5ref.from_onnx(lenet)
    transformed = d5ref.from_onnx(microbatch_convolutions(lenet, micro_batch=2))
    expected = original.inference_and_backprop(inputs, "loss")
    peak_original = original.peak_memory_bytes()
    got = transformed.inference_and_backprop(inputs, "loss")
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert peak_original > 0


def test_peak_memory_of_a_convolutional_network_drops():
    """The im2col workspace inside each convolution shrinks with the micro-batch; only
    tracing every allocation sees it."""
    model = create_model("resnet20", batch_size=BATCH)
    inputs = make_inputs(model, BATCH, 0, 10)
    original = d5ref.from_onnx(model)
    transformed = d5ref.from_onnx(microbatch_convolutions(model, micro_batch=2))
    peaks = {}
    for name, executor in (("original", original), ("transformed", transformed)):
        result = d5.test_executor_inference(executor, inputs,
                                            metrics=[d5.PeakMemory("tracemalloc")])
        peaks[name] = result["PeakMemory"].summary["peak_bytes"]
    assert peaks["transformed"] < 0.8 * peaks["original"], peaks


def test_symbolic_batch_needs_a_batch_size():
    model = create_model("lenet")  # batch dimension "N"
    with pytest.raises(Deep500Error, match="symbolic batch size"):
        microbatch_convolutions(model, micro_batch=2)
    transformed = microbatch_convolutions(model, micro_batch=2, batch_size=4)
    x = np.random.default_rng(0).standard_normal((4, 1, 28, 28)).astype(np.float32)
    np.testing.assert_allclose(d5ref.from_onnx(transformed).inference({"input": x})["output"],
                               d5ref.from_onnx(model).inference({"input": x})["output"],
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(Deep500Error, match="at least 1"):
        microbatch_convolutions(model, micro_batch=0)
