"""The reference graph executor on small ONNX models built with onnx.helper: inference
against ONNX Runtime, gradients against finite differences and PyTorch autograd, events,
errors, the network's tensor API and memory freeing."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500.frameworks.reference as d5ref
from deep500.frameworks.reference.executor import ReferenceGraphExecutor
from deep500.lv1_network import ExecutorEvent, gradient_name
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from deep500.utils.onnx_interop import load_and_parse_model, operator_class

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
        np.int64: TensorProto.INT64}
# Inference against ONNX Runtime (float32), and gradients against finite differences and
# PyTorch (float64).
INFERENCE_TOL = dict(rtol=1e-5, atol=1e-6)
GRADIENT_TOL = dict(rtol=1e-6, atol=1e-9)


def value_info(name, dtype, shape):
    return helper.make_tensor_value_info(name, ELEM[dtype], shape)


def make_model(name, nodes, inputs, outputs, params, opset=17):
    """A checked ModelProto; ``inputs``/``outputs`` are (name, dtype, shape) triples and
    ``params`` {name: array} its initializers. IR version 8 so ONNX Runtime loads it."""
    graph = helper.make_graph(nodes, name, [value_info(*i) for i in inputs],
                              [value_info(*o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return model


def run_onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def with_params(model, params):
    """A copy of ``model`` whose initializers take the values in ``params``."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for tensor in model.graph.initializer:
        if tensor.name in params:
            tensor.CopyFrom(numpy_helper.from_array(params[tensor.name], tensor.name))
    return model


def finite_difference_check(executor, feeds, y, elements=3, eps=1e-6, seed=0):
    """Central differences of y w.r.t. a few elements of every parameter (float64),
    compared with the executor's gradients."""
    network = executor.network
    grads = executor.inference_and_backprop(feeds, y)
    rng = np.random.default_rng(seed)
    for param in network.get_params():
        value = network.fetch_tensor(param)
        flat = value.reshape(-1)
        for i in rng.choice(flat.size, size=min(elements, flat.size), replace=False):
            original = flat[i]
            flat[i] = original + eps
            plus = float(executor.inference(feeds)[y])
            flat[i] = original - eps
            minus = float(executor.inference(feeds)[y])
            flat[i] = original
            numeric = (plus - minus) / (2 * eps)
            analytic = grads[gradient_name(param)].reshape(-1)[i]
            np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8,
                                       err_msg=f"d{y}/d{param}[{i}]")
    return grads


# -- models ------------------------------------------------------------------------------
def mlp(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    params = {"W1": rng.standard_normal((6, 8)), "b1": rng.standard_normal(8) * 0.1,
              "W2": rng.standard_normal((3, 8)), "b2": rng.standard_normal(3) * 0.1}
    params = {k: v.astype(dtype) for k, v in params.items()}
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "W2", "b2"], ["logits"], name="fc2", transB=1),
             helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
                              name="xent")]
    return make_model("mlp", nodes, [("x", dtype, ["N", 6]), ("labels", np.int64, ["N"])],
                      [("loss", dtype, []), ("logits", dtype, ["N", 3])], params)


def mlp_feeds(dtype=np.float32, batch=5, seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 6)).astype(dtype),
            "labels": rng.integers(0, 3, batch).astype(np.int64)}


def cnn(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    params = {"W": rng.standard_normal((4, 2, 3, 3)) * 0.5, "B": rng.standard_normal(4) * 0.1,
              "scale": 1 + 0.1 * rng.standard_normal(4), "bias": 0.1 * rng.standard_normal(4),
              "mean": 0.1 * rng.standard_normal(4), "var": 1 + rng.random(4),
              "Wfc": rng.standard_normal((3, 4)), "bfc": rng.standard_normal(3) * 0.1}
    params = {k: v.astype(dtype) for k, v in params.items()}
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"],
                         name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "Wfc", "bfc"], ["logits"], name="fc", transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
                         name="xent"),
    ]
    return make_model("cnn", nodes, [("x", dtype, ["N", 2, 6, 6]),
                                     ("labels", np.int64, ["N"])],
                      [("loss", dtype, []), ("logits", dtype, ["N", 3])], params)


def cnn_feeds(dtype=np.float32, batch=3, seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 2, 6, 6)).astype(dtype),
            "labels": rng.integers(0, 3, batch).astype(np.int64)}


def shared_tensors(dtype=np.float64):
    """``a`` feeds two nodes, ``m`` one node twice and parameter ``W`` three nodes: their
    gradients accumulate."""
    rng = np.random.default_rng(2)
    params = {"W": rng.standard_normal((4, 4)).astype(dtype),
              "c": rng.standard_normal(4).astype(dtype)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"], name="matmul"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Tanh", ["a"], ["t"], name="tanh"),
             helper.make_node("Mul", ["r", "t"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "m"], ["sq"], name="square"),
             helper.make_node("Add", ["sq", "W"], ["s"], name="add_w"),
             helper.make_node("MatMul", ["s", "W"], ["sw"], name="matmul_w"),
             helper.make_node("Add", ["sw", "c"], ["z"], name="add_c"),
             helper.make_node("ReduceSum", ["z"], ["loss"], name="sum", keepdims=0)]
    model = make_model("shared", nodes, [("x", dtype, [4, 4])], [("loss", dtype, [])],
                       params)

    def torch_fn(x, W, c):
        a = x @ W
        m = torch.relu(a) * torch.tanh(a)
        return ((m * m + W) @ W + c).sum()
    return model, torch_fn


def exported_reshape(dtype=np.float32):
    """The Shape → Gather → Unsqueeze → Concat → Reshape chain torch.onnx.export emits
    for ``x.reshape(x.shape[0], -1)``, with Constant nodes."""
    rng = np.random.default_rng(3)
    params = {"W": (rng.standard_normal((3, 2, 3, 3)) * 0.5).astype(dtype),
              "Wfc": rng.standard_normal((3 * 4 * 4, 5)).astype(dtype)}
    constant = helper.make_node
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["conv"], name="/conv/Conv"),
        helper.make_node("Shape", ["conv"], ["shape"], name="/Shape"),
        constant("Constant", [], ["zero"], name="/Constant",
                 value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="/Gather", axis=0),
        constant("Constant", [], ["axes"], name="/Constant_1", value_ints=[0]),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"], name="/Unsqueeze"),
        constant("Constant", [], ["minus_one"], name="/Constant_2",
                 value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], name="/Concat",
                         axis=0),
        helper.make_node("Reshape", ["conv", "target"], ["flat"], name="/Reshape"),
        helper.make_node("MatMul", ["flat", "Wfc"], ["y"], name="/fc/MatMul"),
        helper.make_node("ReduceMean", ["y"], ["loss"], name="/ReduceMean", keepdims=0),
    ]
    return make_model("exported", nodes, [("x", dtype, ["batch", 2, 6, 6])],
                      [("y", dtype, ["batch", 5]), ("loss", dtype, [])], params)


# -- inference -----------------------------------------------------------------------------
@pytest.mark.parametrize("build,feeds", [(mlp, mlp_feeds), (cnn, cnn_feeds)],
                         ids=["mlp", "cnn"])
def test_inference_matches_onnxruntime(build, feeds):
    model, inputs = build(), feeds()
    executor = d5ref.from_onnx(model)
    assert isinstance(executor, ReferenceGraphExecutor)
    got = executor.inference(inputs)
    expected = run_onnxruntime(model, inputs)
    assert set(got) == {"loss", "logits"}
    for name, value in expected.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape
        np.testing.assert_allclose(got[name], value, **INFERENCE_TOL, err_msg=name)


def test_exported_reshape_chain_with_dynamic_batch():
    model = exported_reshape()
    executor = d5ref.from_onnx(model)
    for batch in (1, 4):
        x = np.random.default_rng(batch).standard_normal((batch, 2, 6, 6)).astype(np.float32)
        got = executor.inference({"x": x})
        expected = run_onnxruntime(model, {"x": x})
        for name in ("y", "loss"):
            np.testing.assert_allclose(got[name], expected[name], **INFERENCE_TOL)
    # Constant nodes become constants, not operations.
    assert "/Constant" not in executor.network.operation_names()
    assert executor.network.fetch_tensor("minus_one").tolist() == [-1]


def test_legacy_opset_attributes_become_inputs():
    """Opset 9 keeps Slice/Clip/Pad/Squeeze/Unsqueeze/ReduceSum/Split arguments in
    attributes, and Softmax flattens to 2-D at its axis."""
    nodes = [
        helper.make_node("Slice", ["x"], ["s"], starts=[0, 1], ends=[2, 100], axes=[0, 2]),
        helper.make_node("Clip", ["s"], ["c"], min=-0.5, max=0.8),
        helper.make_node("Pad", ["c"], ["p"], pads=[0, 1, 0, 0, 1, 0], value=0.25),
        helper.make_node("Unsqueeze", ["p"], ["u"], axes=[0]),
        helper.make_node("Squeeze", ["u"], ["q"], axes=[0]),
        helper.make_node("Softmax", ["q"], ["sm"], axis=1),
        helper.make_node("Split", ["sm"], ["a", "b"], axis=1, split=[1, 4]),
        helper.make_node("ReduceSum", ["b"], ["y"], axes=[2], keepdims=0),
    ]
    model = make_model("legacy", nodes, [("x", np.float32, [3, 3, 5])],
                       [("a", np.float32, [2, 1, 4]), ("y", np.float32, [2, 4])], {},
                       opset=9)
    x = np.random.default_rng(0).standard_normal((3, 3, 5)).astype(np.float32)
    got = d5ref.from_onnx(model).inference({"x": x})
    expected = run_onnxruntime(model, {"x": x})
    for name in ("a", "y"):
        np.testing.assert_allclose(got[name], expected[name], **INFERENCE_TOL)


def test_float64_model():
    model = mlp(np.float64)
    inputs = mlp_feeds(np.float64)
    executor = d5ref.from_onnx(model)
    outputs = executor.inference(inputs)
    assert outputs["logits"].dtype == np.float64 and outputs["loss"].dtype == np.float64
    params = {k: torch.from_numpy(executor.network.fetch_tensor(k)) for k in
              ("W1", "b1", "W2", "b2")}
    x = torch.from_numpy(inputs["x"])
    logits = torch.relu(x @ params["W1"] + params["b1"]) @ params["W2"].T + params["b2"]
    np.testing.assert_allclose(outputs["logits"], logits.numpy(), rtol=1e-12)
    grads = executor.inference_and_backprop(inputs, "loss")
    assert all(grads[gradient_name(p)].dtype == np.float64 for p in params)


# -- backpropagation -----------------------------------------------------------------------
def test_mlp_gradients_match_pytorch_and_finite_differences():
    executor = d5ref.from_onnx(mlp(np.float64))
    inputs = mlp_feeds(np.float64)
    result = finite_difference_check(executor, inputs, "loss")
    network = executor.network
    assert network.gradient("loss") == [(p, gradient_name(p)) for p in network.get_params()]
    params = {p: torch.tensor(network.fetch_tensor(p), requires_grad=True)
              for p in network.get_params()}
    x, labels = torch.from_numpy(inputs["x"]), torch.from_numpy(inputs["labels"])
    hidden = torch.relu(x @ params["W1"] + params["b1"])
    loss = torch.nn.functional.cross_entropy(hidden @ params["W2"].T + params["b2"], labels)
    loss.backward()
    np.testing.assert_allclose(result["loss"], loss.item(), rtol=1e-12)
    for name, tensor in params.items():
        np.testing.assert_allclose(result[gradient_name(name)], tensor.grad.numpy(),
                                   **GRADIENT_TOL, err_msg=name)


def test_mlp_float32_gradients_match_pytorch():
    executor = d5ref.from_onnx(mlp(np.float32))
    inputs = mlp_feeds(np.float32)
    result = executor.inference_and_backprop(inputs, "loss")
    params = {p: torch.tensor(executor.network.fetch_tensor(p), requires_grad=True)
              for p in executor.network.get_params()}
    x, labels = torch.from_numpy(inputs["x"]), torch.from_numpy(inputs["labels"])
    logits = torch.relu(x @ params["W1"] + params["b1"]) @ params["W2"].T + params["b2"]
    torch.nn.functional.cross_entropy(logits, labels).backward()
    for name, tensor in params.items():
        assert result[gradient_name(name)].dtype == np.float32
        np.testing.assert_allclose(result[gradient_name(name)], tensor.grad.numpy(),
                                   rtol=1e-4, atol=1e-6, err_msg=name)


def test_cnn_gradients_match_finite_differences():
    executor = d5ref.from_onnx(cnn(np.float64))
    result = finite_difference_check(executor, cnn_feeds(np.float64), "loss")
    assert {gradient_name(p) for p in executor.network.get_params()} <= set(result)
    assert result["W.grad"].shape == (4, 2, 3, 3)


def test_gradients_accumulate_over_shared_tensors():
    model, torch_fn = shared_tensors()
    executor = d5ref.from_onnx(model)
    x = np.random.default_rng(5).standard_normal((4, 4))
    result = finite_difference_check(executor, {"x": x}, "loss", elements=5)
    W = torch.tensor(executor.network.fetch_tensor("W"), requires_grad=True)
    c = torch.tensor(executor.network.fetch_tensor("c"), requires_grad=True)
    torch_fn(torch.from_numpy(x), W, c).backward()
    np.testing.assert_allclose(result["W.grad"], W.grad.numpy(), **GRADIENT_TOL)
    np.testing.assert_allclose(result["c.grad"], c.grad.numpy(), **GRADIENT_TOL)
    # Repeated runs give the same gradients (nothing accumulates across runs).
    again = executor.inference_and_backprop({"x": x}, "loss")
    np.testing.assert_array_equal(again["W.grad"], result["W.grad"])


def test_exported_reshape_chain_gradients():
    executor = d5ref.from_onnx(exported_reshape(np.float64))
    x = np.random.default_rng(6).standard_normal((3, 2, 6, 6))
    finite_difference_check(executor, {"x": x}, "loss")


def test_fetch_and_feed_tensors():
    executor = d5ref.from_onnx(mlp())
    network = executor.network
    inputs = mlp_feeds()
    result = executor.inference_and_backprop(inputs, "loss")
    for param in network.get_params():
        np.testing.assert_array_equal(network.fetch_tensor(gradient_name(param)),
                                      result[gradient_name(param)])
    np.testing.assert_array_equal(network.fetch_tensor("logits"), result["logits"])
    with pytest.raises(Deep500Error, match="add_output"):
        network.fetch_tensor("h")
    with pytest.raises(Deep500Error, match="no tensor 'nonexistent'"):
        network.fetch_tensor("nonexistent")

    network.feed_tensor("W2", np.zeros((3, 8), np.float32))
    logits = executor.inference(inputs)["logits"]
    np.testing.assert_allclose(logits, np.broadcast_to(network.fetch_tensor("b2"), (5, 3)))

    network.add_output("h")
    outputs = executor.inference(inputs)
    assert "h" in outputs and network.fetch_tensor("h").shape == (5, 8)


def test_add_and_remove_nodes():
    executor = d5ref.from_onnx(mlp())
    network = executor.network
    inputs = mlp_feeds()
    logits = executor.inference(inputs)["logits"]
    network.add_node(operator_class("Sigmoid")("extra", ["logits"], ["probabilities"]))
    network.add_output("probabilities")
    outputs = executor.inference(inputs)
    np.testing.assert_allclose(outputs["probabilities"], 1 / (1 + np.exp(-logits)), rtol=1e-6)
    network.remove_node("extra")
    assert "probabilities" not in executor.inference(inputs)
    network.remove_node("xent")
    assert set(executor.inference(inputs)) == {"logits"}


# -- memory --------------------------------------------------------------------------------
def relu_chain(length=8, size=(256, 256)):
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"relu{i}")
             for i in range(length)]
    nodes.append(helper.make_node("ReduceSum", [f"t{length}"], ["loss"], keepdims=0))
    params = {"t0": np.ones(size, np.float32)}
    return make_model("chain", nodes, [], [("loss", np.float32, [])], params)


def test_intermediates_are_freed():
    executor = d5ref.from_onnx(relu_chain())
    executor.inference({})
    tensor = 256 * 256 * 4
    # The parameter and one intermediate: the first Relu reads the parameter into a new
    # tensor, each later one overwrites its dying input (in-place inference); never the
    # whole chain.
    assert 2 * tensor <= executor.last_peak_bytes < 3 * tensor
    executor.inference_and_backprop({}, "loss")
    # Backpropagation keeps what the backward passes read.
    assert executor.last_peak_bytes >= 9 * tensor


# -- events --------------------------------------------------------------------------------
class Recorder(ExecutorEvent):
    def __init__(self, wants):
        self.wants_operator_events = wants
        self.calls = []

    def before_executor(self, inputs):
        self.calls.append("before_executor")

    def after_inference(self, outputs):
        self.calls.append("after_inference")

    def after_backprop(self, outputs):
        self.calls.append("after_backprop")

    def before_operator(self, op):
        self.calls.append(("before", op.name))

    def after_operator(self, op):
        self.calls.append(("after", op.name))


def test_operator_events_fire_once_per_node_in_order():
    recorder = Recorder(wants=True)
    quiet = Recorder(wants=False)
    executor = d5ref.from_onnx(exported_reshape(), events=[recorder, quiet])
    x = np.zeros((2, 2, 6, 6), np.float32)
    executor.inference({"x": x})
    nodes = ["/conv/Conv", "/Shape", "/Gather", "/Unsqueeze", "/Concat", "/Reshape",
             "/fc/MatMul", "/ReduceMean"]
    expected = [c for n in nodes for c in (("before", n), ("after", n))]
    assert recorder.calls == ["before_executor"] + expected + ["after_inference"]
    assert quiet.calls == ["before_executor", "after_inference"]
    recorder.calls.clear()
    executor.inference_and_backprop({"x": x}, "loss")
    assert recorder.calls == ["before_executor"] + expected + ["after_backprop"]

    # On request, also around each backward that runs (the shape computation has no
    # gradient to propagate, so its backward is skipped).
    executor.events_in_backward = True
    recorder.calls.clear()
    executor.inference_and_backprop({"x": x}, "loss")
    backward = ["/ReduceMean", "/fc/MatMul", "/Reshape", "/conv/Conv"]
    assert recorder.calls == (["before_executor"] + expected
                              + [c for n in backward for c in (("before", n), ("after", n))]
                              + ["after_backprop"])


def test_every_reference_operator_is_visitable():
    visitor = d5ref.ReferenceVisitor()
    assert all(visitor.supports(name) for name in d5ref.operator_names())
    assert visitor.supports("Constant") and visitor.supports("LSTM")
    assert not visitor.supports("Bernoulli")


# -- errors --------------------------------------------------------------------------------
def test_operator_without_reference_implementation():
    # Bernoulli draws random numbers, which no Deep500 executor runs.
    nodes = [helper.make_node("Bernoulli", ["x"], ["y"], name="coin_node")]
    model = make_model("coins", nodes, [("x", np.float32, [4, 3])],
                       [("y", np.float32, [4, 3])], {})
    with pytest.raises(UnsupportedError) as info:
        d5ref.from_onnx(model)
    assert all(s in str(info.value) for s in ("Bernoulli", "coin_node", "coins"))


def test_operator_of_custom_domain():
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example")
    graph = helper.make_graph([node], "custom", [value_info("x", np.float32, [2])],
                              [value_info("y", np.float32, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedError) as info:
        d5ref.from_onnx(load_and_parse_model(model, check=False))
    assert all(s in str(info.value) for s in ("Frobnicate", "frob", "custom"))


def test_unsupported_attribute_value():
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                              name="bn_node", spatial=0)]
    params = {k: np.ones(3, np.float32) for k in "sbmv"}
    model = make_model("legacy_bn", nodes, [("x", np.float32, [2, 3])],
                       [("y", np.float32, [2, 3])], params, opset=7)
    with pytest.raises(UnsupportedError, match="bn_node.*legacy_bn.*spatial=0"):
        d5ref.from_onnx(model)
    # The default value is accepted.
    nodes[0] = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                spatial=1)
    d5ref.from_onnx(make_model("legacy_bn", nodes, [("x", np.float32, [2, 3])],
                               [("y", np.float32, [2, 3])], params, opset=7))


def test_input_errors():
    executor = d5ref.from_onnx(mlp())
    with pytest.raises(Deep500Error, match="needs inputs.*labels"):
        executor.inference({"x": np.zeros((2, 6), np.float32)})
    with pytest.raises(ShapeError, match="'x'.*shape"):
        executor.inference({"x": np.zeros((2, 7), np.float32),
                            "labels": np.zeros(2, np.int64)})


def test_backprop_needs_a_scalar_output():
    executor = d5ref.from_onnx(mlp())
    with pytest.raises(Deep500Error, match="'logits'.*scalar"):
        executor.inference_and_backprop(mlp_feeds(), "logits")
    with pytest.raises(Deep500Error, match="'h'.*not an output"):
        executor.inference_and_backprop(mlp_feeds(), "h")


def test_options_and_devices():
    with pytest.raises(Deep500Error, match="takes no options"):
        d5ref.from_onnx(mlp(), threads=4)
    with pytest.raises(UnsupportedError, match="CPU only"):
        d5ref.from_onnx(mlp(), device="gpu")
