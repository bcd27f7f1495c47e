"""The TensorFlow graph executors (d5tf): ONNX models built with ``onnx.helper`` run in
both modes against onnxruntime (inference) and finite differences or PyTorch autograd
(gradients); the channels-last layout propagation against the boundary conversion; a
Keras model behind the same interface; per-operator events; errors."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.lv1_network import ExecutorEvent, gradient_name  # noqa: E402
from deep500.utils.errors import Deep500Error, UnsupportedError  # noqa: E402
from deep500.utils.onnx_interop.schemas import operator_class  # noqa: E402

MODES = ["eager", "function"]
FLOAT32 = dict(rtol=1e-5, atol=1e-5)
NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.int64): TensorProto.INT64}


# -- model building --------------------------------------------------------------------
def make_model(nodes, inputs, outputs, initializers=None, opset=17, name="test"):
    """inputs/outputs: {name: (np dtype, shape)}; initializers: {name: array}."""
    def info(name, dtype, shape):
        return helper.make_tensor_value_info(name, NP_TO_ONNX[np.dtype(dtype)], shape)
    graph = helper.make_graph(
        nodes, name, [info(n, *spec) for n, spec in inputs.items()],
        [info(n, *spec) for n, spec in outputs.items()],
        [numpy_helper.from_array(v, n) for n, v in (initializers or {}).items()])
    return helper.make_model(graph, ir_version=8,
                             opset_imports=[helper.make_opsetid("", opset)])


def run_ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def rng(seed=0):
    return np.random.default_rng(seed)


def normal(r, *shape, dtype=np.float32):
    return r.standard_normal(shape).astype(dtype)


def assert_outputs_match(outputs, expected, **tol):
    for name, value in expected.items():
        np.testing.assert_allclose(outputs[name], value, err_msg=name, **(tol or FLOAT32))


# -- models ----------------------------------------------------------------------------
def mlp(dtype=np.float32):
    r = rng(1)
    inits = {"W1": normal(r, 16, 8, dtype=dtype), "b1": normal(r, 16, dtype=dtype),
             "W2": normal(r, 4, 16, dtype=dtype), "b2": normal(r, 4, dtype=dtype)}
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1, name="fc1"),
             helper.make_node("Relu", ["h"], ["a"], name="relu"),
             helper.make_node("Gemm", ["a", "W2", "b2"], ["logits"], transB=1, name="fc2"),
             helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
                              name="xent")]
    return make_model(nodes, {"x": (dtype, [5, 8]), "labels": (np.int64, [5])},
                      {"logits": (dtype, [5, 4]), "loss": (dtype, [])}, inits, name="mlp")


def mlp_inputs(dtype=np.float32):
    r = rng(2)
    return {"x": normal(r, 5, 8, dtype=dtype), "labels": r.integers(0, 4, 5).astype(np.int64)}


def cnn(dtype=np.float32):
    """Conv (asymmetric pads, strides) → BN → Relu → grouped Conv → MaxPool → depthwise
    dilated Conv → AveragePool (pads, count_include_pad=0, ceil) + residual → Global
    pooling → Flatten → Gemm, and a scalar loss weighting every logit."""
    r = rng(3)
    inits = {
        "W1": normal(r, 4, 3, 3, 3, dtype=dtype) * 0.5, "B1": normal(r, 4, dtype=dtype),
        "scale": (1 + 0.1 * normal(r, 4)).astype(dtype), "shift": normal(r, 4, dtype=dtype),
        "mean": normal(r, 4, dtype=dtype) * 0.1,
        "var": (1 + 0.5 * r.random(4)).astype(dtype),
        "W2": normal(r, 6, 2, 3, 3, dtype=dtype) * 0.5,
        "W3": normal(r, 6, 1, 2, 2, dtype=dtype) * 0.5, "B3": normal(r, 6, dtype=dtype),
        "Wf": normal(r, 3, 6, dtype=dtype), "bf": normal(r, 3, dtype=dtype),
        "R": normal(r, 2, 3, dtype=dtype),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 0, 2, 1],
                         strides=[2, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "scale", "shift", "mean", "var"],
                         ["n1"], epsilon=1e-3, name="bn"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "W2"], ["c2"], group=2, pads=[1, 1, 1, 1],
                         name="conv_grouped"),
        helper.make_node("MaxPool", ["c2"], ["p1"], kernel_shape=[2, 2], strides=[1, 2],
                         pads=[0, 1, 0, 0], name="maxpool"),
        helper.make_node("Conv", ["p1", "W3", "B3"], ["c3"], group=6, dilations=[2, 1],
                         pads=[1, 1, 1, 0], name="conv_depthwise"),
        helper.make_node("AveragePool", ["c3"], ["p2"], kernel_shape=[3, 2],
                         strides=[1, 1], pads=[1, 0, 1, 1], ceil_mode=1, name="avgpool"),
        helper.make_node("Add", ["p2", "c3"], ["s"], name="residual"),
        helper.make_node("GlobalAveragePool", ["s"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "Wf", "bf"], ["logits"], transB=1, name="fc"),
        helper.make_node("Mul", ["logits", "R"], ["weighted"], name="weigh"),
        helper.make_node("ReduceSum", ["weighted"], ["loss"], keepdims=0, name="sum"),
    ]
    return make_model(nodes, {"x": (dtype, [2, 3, 9, 8])},
                      {"logits": (dtype, [2, 3]), "loss": (dtype, [])}, inits, name="cnn")


# -- inference against onnxruntime ------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_mlp_inference_matches_onnxruntime(mode):
    model, feeds = mlp(), mlp_inputs()
    executor = d5tf.from_onnx(model, mode=mode)
    assert_outputs_match(executor.inference(feeds), run_ort(model, feeds))
    assert isinstance(executor.network, d5tf.TensorFlowNetwork)
    assert set(executor.input_specs) == {"x", "labels"}


@pytest.mark.parametrize("propagate", [True, False], ids=["channels_last", "boundary"])
@pytest.mark.parametrize("mode", MODES)
def test_cnn_inference_matches_onnxruntime(mode, propagate):
    model = cnn()
    feeds = {"x": normal(rng(4), 2, 3, 9, 8)}
    executor = d5tf.from_onnx(model, mode=mode, propagate_layout=propagate)
    outputs = executor.inference(feeds)
    assert_outputs_match(outputs, run_ort(model, feeds))
    assert outputs["loss"].shape == ()


def test_layout_propagation_transposes_less():
    """From the first convolution on, the tensor stays channels-last (the Gemm after
    Flatten reads it through a weight stored to match): only the input is converted."""
    def transposes(propagate):
        executor = d5tf.from_onnx(cnn(), propagate_layout=propagate)
        plan = executor.network.plan
        return sum(1 for fn, _, _ in plan.steps
                   if fn.__name__ in ("to_channels_last", "to_onnx_layout"))
    assert transposes(True) == 1
    assert transposes(False) > 6


def shape_graph(opset):
    """Conv → Shape → Gather → Unsqueeze → Concat → Reshape: the shape of a tensor the
    executor keeps channels-last, used to reshape it."""
    r = rng(5)
    inits = {"W": normal(r, 4, 2, 3, 3), "idx": np.asarray(0, np.int64),
             "minus_one": np.asarray([-1], np.int64)}
    if opset >= 13:
        inits["axes"] = np.asarray([0], np.int64)
        unsqueeze = helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze")
    else:
        unsqueeze = helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0], name="unsqueeze")
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Shape", ["y"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "idx"], ["n"], axis=0, name="gather"),
             unsqueeze,
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0,
                              name="concat"),
             helper.make_node("Reshape", ["y", "target"], ["z"], name="reshape")]
    return make_model(nodes, {"x": (np.float32, [3, 2, 5, 4])},
                      {"z": (np.float32, [3, 80]), "s": (np.int64, [4])}, inits, opset=opset,
                      name=f"shape_graph_{opset}")


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("mode", MODES)
def test_shape_arithmetic_matches_onnxruntime(mode, opset):
    model = shape_graph(opset)
    feeds = {"x": normal(rng(6), 3, 2, 5, 4)}
    outputs = d5tf.from_onnx(model, mode=mode).inference(feeds)
    expected = run_ort(model, feeds)
    np.testing.assert_array_equal(outputs["s"], expected["s"])
    assert outputs["s"].dtype == np.int64
    assert_outputs_match({"z": outputs["z"]}, {"z": expected["z"]})


@pytest.mark.parametrize("mode", MODES)
def test_softmax_axis_semantics_by_opset(mode):
    """Softmax(axis=1) normalizes over axes 1.. (coerced to 2-D) before opset 13 and over
    axis 1 alone from opset 13."""
    feeds = {"x": normal(rng(7), 2, 3, 4)}
    results = {}
    for opset in (11, 13):
        model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=1),
                            helper.make_node("LogSoftmax", ["x"], ["z"], axis=1)],
                           {"x": (np.float32, [2, 3, 4])},
                           {"y": (np.float32, [2, 3, 4]), "z": (np.float32, [2, 3, 4])},
                           opset=opset)
        results[opset] = d5tf.from_onnx(model, mode=mode).inference(feeds)
        assert_outputs_match(results[opset], run_ort(model, feeds))
    np.testing.assert_allclose(results[13]["y"].sum(axis=1), 1, rtol=1e-5)
    np.testing.assert_allclose(results[11]["y"].sum(axis=(1, 2)), 1, rtol=1e-5)


def layout_mix():
    """Operators that follow a channels-last tensor: broadcasting against a (C, 1, 1)
    constant and a rank-4 input, channel Concat, Transpose, reductions keeping and
    dropping axes, Split, Slice, Pad, Softmax over channels."""
    r = rng(8)
    inits = {"W": normal(r, 4, 2, 1, 1), "bias": normal(r, 4, 1, 1),
             "starts": np.asarray([1, 0], np.int64), "ends": np.asarray([3, 100], np.int64),
             "axes": np.asarray([2, 3], np.int64), "steps": np.asarray([1, 2], np.int64),
             "pads": np.asarray([0, 0, 1, 2, 0, 0, 1, 1], np.int64),
             "split": np.asarray([1, 3], np.int64)}
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"]),
        helper.make_node("Add", ["c", "bias"], ["a"]),
        helper.make_node("Mul", ["a", "other"], ["m"]),
        helper.make_node("Concat", ["m", "c"], ["cat"], axis=1),
        helper.make_node("Transpose", ["cat"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("ReduceMean", ["m"], ["rm"], axes=[2, 3], keepdims=0),
        helper.make_node("ReduceMax", ["m"], ["rk"], axes=[1], keepdims=1),
        helper.make_node("Split", ["m", "split"], ["s0", "s1"], axis=1),
        helper.make_node("Slice", ["s1", "starts", "ends", "axes", "steps"], ["sl"]),
        helper.make_node("Pad", ["sl", "pads"], ["pr"], mode="reflect"),
        helper.make_node("Pad", ["sl", "pads"], ["pe"], mode="edge"),
        helper.make_node("Softmax", ["c"], ["sm"], axis=1),
        helper.make_node("Sigmoid", ["rk"], ["sg"]),
    ]
    f = np.float32
    outputs = {"t": (f, [2, 4, 5, 8]), "rm": (f, [2, 4]), "sg": (f, [2, 1, 4, 5]),
               "s0": (f, [2, 1, 4, 5]), "pr": (f, [2, 3, 4, 6]), "pe": (f, [2, 3, 4, 6]),
               "sm": (f, [2, 4, 4, 5])}
    return make_model(nodes, {"x": (f, [2, 2, 4, 5]), "other": (f, [2, 4, 4, 5])},
                      outputs, inits, opset=13, name="layout_mix")


@pytest.mark.parametrize("propagate", [True, False], ids=["channels_last", "boundary"])
@pytest.mark.parametrize("mode", MODES)
def test_layout_sensitive_operators_match_onnxruntime(mode, propagate):
    model = layout_mix()
    r = rng(9)
    feeds = {"x": normal(r, 2, 2, 4, 5), "other": normal(r, 2, 4, 4, 5)}
    executor = d5tf.from_onnx(model, mode=mode, propagate_layout=propagate)
    assert_outputs_match(executor.inference(feeds), run_ort(model, feeds))


@pytest.mark.parametrize("mode", MODES)
def test_pooling_and_padding_variants_match_onnxruntime(mode):
    """ceil_mode windows that would start in the padding, count_include_pad, auto_pad,
    and a 1-D convolution."""
    r = rng(10)
    f = np.float32
    nodes = [
        helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[2, 2], strides=[2, 2],
                         pads=[1, 1, 1, 1], ceil_mode=1),
        helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], count_include_pad=1, ceil_mode=1),
        helper.make_node("AveragePool", ["x"], ["s"], kernel_shape=[3, 2], strides=[2, 1],
                         auto_pad="SAME_UPPER"),
        helper.make_node("Conv", ["x", "W"], ["c"], auto_pad="SAME_LOWER", strides=[2, 2]),
        helper.make_node("Conv", ["v", "W1"], ["c1"], pads=[2, 1], strides=[2]),
        helper.make_node("GlobalMaxPool", ["x"], ["g"]),
    ]
    model = make_model(
        nodes, {"x": (f, [1, 2, 5, 5]), "v": (f, [2, 3, 7])},
        {**{name: (f, list("abcd")) for name in ("m", "a", "s", "c", "g")},
         "c1": (f, list("abc"))},
        {"W": normal(r, 3, 2, 2, 3), "W1": normal(r, 2, 3, 3)}, name="pools")
    feeds = {"x": normal(r, 1, 2, 5, 5), "v": normal(r, 2, 3, 7)}
    assert_outputs_match(d5tf.from_onnx(model, mode=mode).inference(feeds),
                         run_ort(model, feeds))


# -- gradients ---------------------------------------------------------------------------
def finite_difference_check(executor, feeds, y="loss", eps=1e-6, directions=2):
    """Per parameter, directional derivatives along random directions by central
    differences against the executor's gradients (float64 models)."""
    network = executor.network
    result = executor.inference_and_backprop(feeds, y)
    r = rng(11)
    for param in network.get_params():
        original = network.fetch_tensor(param).copy()
        gradient = result[gradient_name(param)]
        assert gradient.shape == original.shape and gradient.dtype == original.dtype
        for _ in range(directions):
            direction = r.standard_normal(original.shape)
            network.feed_tensor(param, original + eps * direction)
            plus = executor.inference(feeds)[y]
            network.feed_tensor(param, original - eps * direction)
            minus = executor.inference(feeds)[y]
            network.feed_tensor(param, original)
            numeric = float((plus - minus) / (2 * eps))
            analytic = float(np.sum(gradient * direction))
            assert numeric == pytest.approx(analytic, rel=1e-5, abs=1e-7), param


@pytest.mark.parametrize("mode", MODES)
def test_cnn_gradients_match_finite_differences(mode):
    executor = d5tf.from_onnx(cnn(np.float64), mode=mode)
    finite_difference_check(executor, {"x": normal(rng(12), 2, 3, 9, 8, dtype=np.float64)})
    # Batch-norm running statistics are stored, not trained.
    assert set(executor.network.get_params()) == {
        "W1", "B1", "scale", "shift", "W2", "W3", "B3", "Wf", "bf", "R"}


def test_running_statistics_are_variables_but_not_parameters():
    model = cnn()
    executor = d5tf.from_onnx(model, mode="function")
    network = executor.network
    feeds = {"x": normal(rng(22), 2, 3, 9, 8)}
    result = executor.inference_and_backprop(feeds)
    assert gradient_name("mean") not in result and "mean" not in network.get_params()
    mean = network.fetch_tensor("mean") + 1
    network.feed_tensor("mean", mean)
    np.testing.assert_array_equal(network.fetch_tensor("mean"), mean)
    model.graph.initializer.remove(next(t for t in model.graph.initializer
                                        if t.name == "mean"))
    model.graph.initializer.append(numpy_helper.from_array(mean, "mean"))
    assert_outputs_match(executor.inference(feeds), run_ort(model, feeds))
    assert executor.trace_count == 2   # inference and backprop, once each


@pytest.mark.parametrize("mode", MODES)
def test_mlp_gradients_match_pytorch_autograd(mode):
    model, feeds = mlp(), mlp_inputs()
    executor = d5tf.from_onnx(model, mode=mode)
    result = executor.inference_and_backprop(feeds, "loss")
    params = {n: torch.tensor(executor.network.fetch_tensor(n), requires_grad=True)
              for n in ("W1", "b1", "W2", "b2")}
    hidden = torch.relu(torch.from_numpy(feeds["x"]) @ params["W1"].T + params["b1"])
    logits = hidden @ params["W2"].T + params["b2"]
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(feeds["labels"]))
    loss.backward()
    np.testing.assert_allclose(result["loss"], loss.item(), **FLOAT32)
    for name, tensor in params.items():
        np.testing.assert_allclose(result[gradient_name(name)], tensor.grad.numpy(),
                                   err_msg=name, **FLOAT32)
        np.testing.assert_array_equal(executor.network.fetch_tensor(gradient_name(name)),
                                      result[gradient_name(name)])


@pytest.mark.parametrize("mode", MODES)
def test_training_mode_batch_normalization(mode):
    """training_mode=1 normalizes with the batch's statistics and outputs the running
    ones; gradients flow through the batch statistics."""
    r = rng(13)
    d = np.float64
    inits = {"scale": (1 + 0.1 * normal(r, 3, dtype=d)), "shift": normal(r, 3, dtype=d),
             "mean": normal(r, 3, dtype=d), "var": 1 + r.random(3), "R": normal(r, 2, 3, 4, 4,
                                                                          dtype=d)}
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "shift", "mean", "var"],
                              ["y", "rmean", "rvar"], training_mode=1, momentum=0.8),
             helper.make_node("Mul", ["y", "R"], ["w"]),
             helper.make_node("Mul", ["w", "w"], ["w2"]),
             helper.make_node("ReduceSum", ["w2"], ["loss"], keepdims=0)]
    model = make_model(nodes, {"x": (d, [2, 3, 4, 4])},
                       {"y": (d, [2, 3, 4, 4]), "rmean": (d, [3]), "rvar": (d, [3]),
                        "loss": (d, [])}, inits, opset=15)
    x = normal(r, 2, 3, 4, 4, dtype=d)
    executor = d5tf.from_onnx(model, mode=mode)
    outputs = executor.inference({"x": x})
    batch_mean, batch_var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    momentum = float(np.float32(0.8))   # ONNX float attributes are float32
    expected = ((x - batch_mean[:, None, None]) / np.sqrt(batch_var[:, None, None] + 1e-5)
                * inits["scale"][:, None, None] + inits["shift"][:, None, None])
    np.testing.assert_allclose(outputs["y"], expected, rtol=1e-10)
    np.testing.assert_allclose(outputs["rmean"], momentum * inits["mean"]
                               + (1 - momentum) * batch_mean, rtol=1e-10)
    np.testing.assert_allclose(outputs["rvar"], momentum * inits["var"]
                               + (1 - momentum) * batch_var, rtol=1e-10)
    finite_difference_check(executor, {"x": x}, directions=1)


# -- function mode ----------------------------------------------------------------------
def test_function_mode_traces_once_per_input_shape():
    model = make_model([helper.make_node("Gemm", ["x", "W"], ["y"]),
                        helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
                       {"x": (np.float32, ["N", 3])},
                       {"y": (np.float32, ["N", 2]), "loss": (np.float32, [])},
                       {"W": normal(rng(14), 3, 2)})
    executor = d5tf.from_onnx(model, mode="function")
    r = rng(15)
    for batch in (4, 4, 4, 6, 6):
        executor.inference({"x": normal(r, batch, 3)})
        executor.inference_and_backprop({"x": normal(r, batch, 3)}, "loss")
    assert executor.trace_count == 4   # (inference, backprop) × (batch 4, batch 6)
    # A changed parameter is read by the traced function without retracing.
    executor.network.feed_tensor("W", np.zeros((3, 2), np.float32))
    assert np.all(executor.inference({"x": normal(r, 4, 3)})["y"] == 0)
    assert executor.trace_count == 4


# -- network API ------------------------------------------------------------------------
def test_network_graph_edits_and_fetches():
    model, feeds = mlp(), mlp_inputs()
    executor = d5tf.from_onnx(model)
    network = executor.network
    executor.inference(feeds)
    np.testing.assert_allclose(network.fetch_tensor("a"),
                               np.maximum(network.fetch_tensor("h"), 0))
    # Replace the Relu with a Sigmoid under the same names.
    network.remove_node("relu")
    network.add_node(operator_class("Sigmoid", 17)("sigmoid", ["h"], ["a"]))
    network.add_output("a")
    outputs = executor.inference(feeds)
    np.testing.assert_allclose(outputs["a"], 1 / (1 + np.exp(-network.fetch_tensor("h"))),
                               rtol=1e-6)
    assert "a" in network.outputs
    with pytest.raises(UnsupportedError, match="Bernoulli"):
        network.add_node(operator_class("Bernoulli", 22)("coin", ["h"], ["hm"]))
    with pytest.raises(Deep500Error, match="no node 'nope'"):
        network.remove_node("nope")
    with pytest.raises(Deep500Error, match="no tensor"):
        network.fetch_tensor("nope")


def test_parameters_keep_the_onnx_layout_at_the_boundary():
    """Parameters stored in their operators' layouts (convolution filters, a Gemm weight
    after a channels-last Flatten) read, write and differentiate in ONNX's layout; a
    new reader of a stored weight brings it back to ONNX's layout."""
    model = cnn()
    executor = d5tf.from_onnx(model)
    network = executor.network
    assert {"W1", "W2", "W3", "Wf"} <= set(network.layouts)
    for tensor in model.graph.initializer:
        np.testing.assert_array_equal(network.fetch_tensor(tensor.name),
                                      numpy_helper.to_array(tensor), err_msg=tensor.name)
    feeds = {"x": normal(rng(19), 2, 3, 9, 8)}
    outputs = executor.inference(feeds)
    np.testing.assert_allclose(network.fetch_tensor("f"),
                               network.fetch_tensor("g").reshape(2, 6), rtol=1e-6)
    # Feeding in ONNX layout changes the result as onnxruntime's does.
    new_wf = normal(rng(20), 3, 6)
    network.feed_tensor("Wf", new_wf)
    np.testing.assert_array_equal(network.fetch_tensor("Wf"), new_wf)
    model.graph.initializer.remove(next(t for t in model.graph.initializer
                                        if t.name == "Wf"))
    model.graph.initializer.append(numpy_helper.from_array(new_wf, "Wf"))
    assert_outputs_match(executor.inference(feeds), run_ort(model, feeds))
    assert not np.allclose(outputs["logits"], executor.inference(feeds)["logits"])
    # W1 read by another node too: stored in ONNX layout again, same results.
    network.add_node(operator_class("ReduceSum", 17)("w1_sum", ["W1"], ["w1_total"],
                                                     {"keepdims": 0}))
    network.add_output("w1_total")
    result = executor.inference_and_backprop(feeds)
    assert "W1" not in network.layouts
    np.testing.assert_allclose(result["w1_total"], network.fetch_tensor("W1").sum(),
                               rtol=1e-5)
    np.testing.assert_allclose(result["logits"], run_ort(model, feeds)["logits"], **FLOAT32)


def test_network_built_by_hand():
    """A network built with the graph API alone (no model, no shape information)."""
    r = rng(21)
    w, x = normal(r, 3, 4), normal(r, 2, 3)
    network = d5tf.TensorFlowNetwork("by_hand")
    network.inputs.append("x")
    network.feed_tensor("W", w, is_param=True)
    network.add_node(operator_class("MatMul", 17)("matmul", ["x", "W"], ["y"]))
    network.add_node(operator_class("Relu", 17)("relu", ["y"], ["z"]))
    network.add_node(operator_class("ReduceSum", 17)("sum", ["z"], ["loss"],
                                                     {"keepdims": 0}))
    network.add_output("z")
    network.add_output("loss")
    executor = d5tf.TensorFlowGraphExecutor(network)
    result = executor.inference_and_backprop({"x": x}, "loss")
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    y = x64 @ w64
    assert_product_close(result["z"], np.maximum(y, 0), np.abs(x64) @ np.abs(w64), 3)
    # No element of x @ w lies within its rounding bound of 0 (the closest is 2000
    # bounds away for this seed), so the ReLU mask is the same on every CPU.
    mask = (y > 0).astype(np.float64)
    assert_product_close(result[gradient_name("W")], x64.T @ mask, np.abs(x64.T) @ mask, 2)


def assert_product_close(actual, exact, magnitude, k):
    """A float32 sum of ``k`` products is within ``k * eps * sum|a_i b_i|`` of the exact
    value (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5);
    any order of summation, fused or not, meets this bound, so it holds on every CPU.
    Twice the bound leaves room for rounding the result itself."""
    bound = 2 * k * np.finfo(np.float32).eps * magnitude
    np.testing.assert_array_less(np.abs(actual.astype(np.float64) - exact), bound + 1e-30)


def test_function_mode_keeps_only_outputs():
    model, feeds = mlp(), mlp_inputs()
    executor = d5tf.from_onnx(model, mode="function")
    executor.inference(feeds)
    with pytest.raises(Deep500Error, match="add_output"):
        executor.network.fetch_tensor("h")
    executor.network.add_output("h")
    np.testing.assert_allclose(executor.inference(feeds)["h"],
                               executor.network.fetch_tensor("h"))


# -- events -----------------------------------------------------------------------------
class CountingEvent(ExecutorEvent):
    wants_operator_events = True

    def __init__(self):
        self.calls = []

    def before_operator(self, op):
        self.calls.append(("before", op.name))

    def after_operator(self, op):
        self.calls.append(("after", op.name))


class RunEvent(ExecutorEvent):
    def __init__(self):
        self.operators = 0
        self.runs = 0

    def before_operator(self, op):
        self.operators += 1

    def after_inference(self, outputs):
        self.runs += 1

    after_backprop = after_inference


def test_operator_events_fire_once_per_node_in_eager_mode():
    model, feeds = cnn(), {"x": normal(rng(16), 2, 3, 9, 8)}
    counting, plain = CountingEvent(), RunEvent()
    executor = d5tf.from_onnx(model, events=[counting, plain])
    names = [op.name for op in executor.network.operations]
    for run in (executor.inference, lambda f: executor.inference_and_backprop(f, "loss")):
        counting.calls.clear()
        run(feeds)
        expected = [(kind, name) for name in names for kind in ("before", "after")]
        assert counting.calls == expected
    assert plain.operators == 0 and plain.runs == 2


def test_operator_events_need_eager_mode():
    with pytest.raises(Deep500Error, match="mode='eager'"):
        d5tf.from_onnx(mlp(), mode="function", events=[CountingEvent()])
    executor = d5tf.from_onnx(mlp(), mode="function", events=[RunEvent()])
    executor.inference(mlp_inputs())
    executor.events.append(CountingEvent())
    with pytest.raises(Deep500Error, match="mode='eager'"):
        executor.inference(mlp_inputs())


# -- errors -----------------------------------------------------------------------------
def test_unsupported_operator_names_operator_node_and_model():
    # Bernoulli draws random numbers: no Deep500 executor runs it (results would differ
    # from framework to framework).
    model = make_model([helper.make_node("Bernoulli", ["x"], ["y"], name="the_node")],
                       {"x": (np.float32, [2, 3])}, {"y": (np.float32, [2, 3])},
                       name="the_model")
    with pytest.raises(UnsupportedError, match="Bernoulli.*the_node.*the_model"):
        d5tf.from_onnx(model)


@pytest.mark.parametrize("mode", MODES)
def test_backprop_needs_a_scalar_output(mode):
    executor = d5tf.from_onnx(mlp(), mode=mode)
    with pytest.raises(Deep500Error, match="scalar"):
        executor.inference_and_backprop(mlp_inputs(), "logits")
    with pytest.raises(Deep500Error, match="not an output"):
        executor.inference_and_backprop(mlp_inputs(), "h")


def test_bad_options():
    with pytest.raises(Deep500Error, match="Unknown options"):
        d5tf.from_onnx(mlp(), layout="nhwc")
    with pytest.raises(Deep500Error, match="unknown mode"):
        d5tf.from_onnx(mlp(), mode="graph")


# -- Keras ------------------------------------------------------------------------------
def keras_and_onnx_mlp():
    keras = pytest.importorskip("keras")
    r = rng(17)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(4)])
    weights = [normal(r, *v.shape) for v in model.weights]
    model.set_weights(weights)
    k1, b1, k2, b2 = weights
    onnx_model = make_model(
        [helper.make_node("Gemm", ["x", "k1", "b1"], ["h"]),
         helper.make_node("Relu", ["h"], ["a"]),
         helper.make_node("Gemm", ["a", "k2", "b2"], ["logits"]),
         helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"])],
        {"x": (np.float32, [5, 8]), "labels": (np.int64, [5])},
        {"logits": (np.float32, [5, 4]), "loss": (np.float32, [])},
        {"k1": k1, "b1": b1, "k2": k2, "b2": b2})
    names = {v.path: onnx_name for v, onnx_name in
             zip(model.trainable_variables, ["k1", "b1", "k2", "b2"])}
    return model, onnx_model, names


def sparse_xent(outputs, inputs):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        inputs["labels"], outputs["logits"]))


@pytest.mark.parametrize("mode", MODES)
def test_keras_model_matches_the_onnx_executor(mode):
    keras_model, onnx_model, names = keras_and_onnx_mlp()
    native = d5tf.TensorFlowNativeGraphExecutor(keras_model, ["x"], ["logits"],
                                                loss_fn=sparse_xent, mode=mode)
    feeds = mlp_inputs()
    expected = d5tf.from_onnx(onnx_model, mode=mode).inference_and_backprop(feeds, "loss")
    outputs = native.inference(feeds)
    assert_outputs_match(outputs, {"logits": expected["logits"], "loss": expected["loss"]})
    result = native.inference_and_backprop(feeds)
    assert set(native.network.get_params()) == set(names)
    for path, onnx_name in names.items():
        np.testing.assert_allclose(result[gradient_name(path)],
                                   expected[gradient_name(onnx_name)], err_msg=path, **FLOAT32)
        np.testing.assert_array_equal(native.network.fetch_tensor(gradient_name(path)),
                                      result[gradient_name(path)])
    assert native.input_specs["x"].shape == (None, 8)
    with pytest.raises(Deep500Error, match="scalar"):
        native.inference_and_backprop(feeds, "logits")
    with pytest.raises(Deep500Error, match="per-operator events"):
        d5tf.TensorFlowNativeGraphExecutor(keras_model, ["x"], ["logits"],
                                           events=[CountingEvent()])


def test_keras_convolution_matches_onnx_convolution():
    """A channels-last Keras convolution and the ONNX (NCHW) one with the same weights:
    equal outputs and kernel gradients, up to the layouts."""
    keras = pytest.importorskip("keras")
    r = rng(18)
    layer = keras.layers.Conv2D(3, (2, 3), strides=(1, 2))
    keras_model = keras.Sequential([keras.Input((5, 7, 2)), layer])
    kernel, bias = normal(r, 2, 3, 2, 3), normal(r, 3)
    layer.set_weights([kernel, bias])
    R = normal(r, 2, 3, 4, 3)   # weights of the loss, NCHW

    def loss_fn(outputs, inputs):
        return tf.reduce_sum(outputs["y"] * np.transpose(R, (0, 2, 3, 1)))
    native = d5tf.TensorFlowNativeGraphExecutor(keras_model, ["x"], ["y"], loss_fn=loss_fn)
    onnx_model = make_model(
        [helper.make_node("Conv", ["x", "W", "B"], ["y"], strides=[1, 2]),
         helper.make_node("Mul", ["y", "R"], ["w"]),
         helper.make_node("ReduceSum", ["w"], ["loss"], keepdims=0)],
        {"x": (np.float32, [2, 2, 5, 7])},
        {"y": (np.float32, [2, 3, 4, 3]), "loss": (np.float32, [])},
        {"W": np.transpose(kernel, (3, 2, 0, 1)), "B": bias, "R": R})
    x = normal(r, 2, 2, 5, 7)
    expected = d5tf.from_onnx(onnx_model).inference_and_backprop({"x": x})
    result = native.inference_and_backprop({"x": np.transpose(x, (0, 2, 3, 1))})
    np.testing.assert_allclose(np.transpose(result["y"], (0, 3, 1, 2)), expected["y"],
                               **FLOAT32)
    kernel_path, bias_path = native.network.get_params()
    np.testing.assert_allclose(np.transpose(result[gradient_name(kernel_path)], (3, 2, 0, 1)),
                               expected[gradient_name("W")], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(result[gradient_name(bias_path)], expected[gradient_name("B")],
                               rtol=1e-5, atol=1e-4)
