"""Reference RNN, GRU and LSTM: forward against onnx's ReferenceEvaluator (which knows
the default activations only, no sequence_lens) and onnxruntime (every attribute), and
backpropagation through time against finite differences in float64."""
import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from tests.frameworks.reference.op_checks import check_gradient

ort = pytest.importorskip("onnxruntime")

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
INPUT_NAMES = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
# float32 results of a short recurrence: a few ulps per step, times the steps.
TOL = {np.float32: dict(rtol=1e-4, atol=1e-5), np.float64: dict(rtol=1e-9, atol=1e-11)}


def make_inputs(op_type, seq=4, batch=3, input_size=2, hidden=3, direction="forward",
                layout=0, bias=True, lengths=None, initial=False, peepholes=False,
                dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    nd = 2 if direction == "bidirectional" else 1
    G = GATES[op_type]
    x_shape = (seq, batch, input_size) if layout == 0 else (batch, seq, input_size)
    s_shape = (nd, batch, hidden) if layout == 0 else (batch, nd, hidden)
    inputs = [rng.standard_normal(x_shape), rng.standard_normal((nd, G * hidden, input_size)) * .6,
              rng.standard_normal((nd, G * hidden, hidden)) * .6,
              rng.standard_normal((nd, 2 * G * hidden)) * .3 if bias else None,
              None if lengths is None else np.array(lengths, np.int32),
              rng.standard_normal(s_shape) * .5 if initial else None]
    if op_type == "LSTM":
        inputs += [rng.standard_normal(s_shape) * .5 if initial else None,
                   rng.standard_normal((nd, 3 * hidden)) * .5 if peepholes else None]
    inputs = [x.astype(dtype) if x is not None and x.dtype.kind == "f" else x
              for x in inputs]
    while inputs[-1] is None:
        inputs.pop()
    return inputs


def one_node_model(op_type, inputs, outputs=3, opset=22, **attributes):
    names = [name if x is not None else "" for name, x in zip(INPUT_NAMES, inputs)]
    out_names = ["Y", "Y_h", "Y_c"][:outputs]
    node = helper.make_node(op_type, names, out_names, **attributes)
    dtype = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if x is not None],
        [helper.make_tensor_value_info(n, dtype, None) for n in out_names])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_oracle(op_type, inputs, engine, **attributes):
    outputs = 3 if op_type == "LSTM" else 2
    model = one_node_model(op_type, inputs, outputs, opset=22 if engine == "onnx" else 14,
                           **attributes)
    feeds = {n: x for n, x in zip(INPUT_NAMES, inputs) if x is not None}
    if engine == "onnx":
        return ReferenceEvaluator(model).run(None, feeds)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_outputs(op_type, inputs, engine, tol, **attributes):
    got = create_operator(op_type, **attributes).forward(*inputs)
    want = run_oracle(op_type, inputs, engine, **attributes)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == inputs[0].dtype and g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, **tol)


# -- forward: onnx's reference implementation (default activations) -------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("case", [
    dict(), dict(direction="reverse"), dict(direction="bidirectional", initial=True),
    dict(layout=1, initial=True), dict(bias=False), dict(peepholes=True, initial=True),
    dict(linear_before_reset=1)])
def test_forward_onnx_reference(op_type, case, dtype):
    case = dict(case)
    attributes = {}
    if "linear_before_reset" in case:
        if op_type != "GRU":
            pytest.skip("GRU only")
        attributes["linear_before_reset"] = case.pop("linear_before_reset")
    if case.get("peepholes") and op_type != "LSTM":
        pytest.skip("LSTM only")
    if case.get("direction") in ("reverse", "bidirectional"):
        pytest.skip("onnx's reference evaluator computes forward only; see onnxruntime tests")
    for key in ("direction", "layout"):
        if key in case:
            attributes[key] = case[key]
    inputs = make_inputs(op_type, dtype=dtype, **case)
    assert_outputs(op_type, inputs, "onnx", TOL[dtype], hidden_size=3, **attributes)


# -- forward: onnxruntime (directions, sequence lengths, activations, clip) --------------
ORT_CASES = [
    (dict(direction="reverse"), {}),
    (dict(direction="bidirectional", initial=True), {}),
    (dict(lengths=[4, 2, 3]), {}),
    (dict(direction="reverse", lengths=[1, 4, 2], initial=True), {}),
    (dict(direction="bidirectional", lengths=[3, 4, 1]), {}),
    (dict(), {"clip": 0.7}),
    (dict(direction="bidirectional"), {"activations": "relu_pair"}),
    (dict(), {"activations": "alpha"}),
    (dict(peepholes=True, initial=True, direction="bidirectional"), {}),
    (dict(), {"input_forget": 1}),
    (dict(initial=True, lengths=[2, 4, 3]), {"linear_before_reset": 1}),
]
ACTIVATIONS = {  # per op: (names, alphas, betas) for the "alpha" case
    "RNN": (["LeakyRelu"], [0.2], []), "GRU": (["HardSigmoid", "Elu"], [0.3, 0.9], [0.4]),
    "LSTM": (["HardSigmoid", "Softsign", "ScaledTanh"], [0.25, 1.5], [0.45, 0.8]),
}
RELU_PAIR = {"RNN": ["Relu", "Tanh"], "GRU": ["Sigmoid", "Relu", "Sigmoid", "Tanh"],
             "LSTM": ["Sigmoid", "Tanh", "Relu", "Sigmoid", "Relu", "Tanh"]}


def ort_attributes(op_type, extra):
    attributes = {}
    for key, value in extra.items():
        if key == "activations" and value == "relu_pair":
            attributes["activations"] = RELU_PAIR[op_type]
        elif key == "activations":
            names, alphas, betas = ACTIVATIONS[op_type]
            attributes["activations"] = names
            if alphas:
                attributes["activation_alpha"] = alphas
            if betas:
                attributes["activation_beta"] = betas
        else:
            attributes[key] = value
    return attributes


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("case,extra", ORT_CASES)
def test_forward_onnxruntime(op_type, case, extra):
    if (case.get("peepholes") or "input_forget" in extra) and op_type != "LSTM":
        pytest.skip("LSTM only")
    if "linear_before_reset" in extra and op_type != "GRU":
        pytest.skip("GRU only")
    attributes = {"hidden_size": 3, **ort_attributes(op_type, extra)}
    if "direction" in case:
        attributes["direction"] = case["direction"]
    inputs = make_inputs(op_type, dtype=np.float32, **case)
    assert_outputs(op_type, inputs, "ort", dict(rtol=1e-4, atol=1e-5), **attributes)


def test_sequence_lengths_zero_the_padded_steps():
    inputs = make_inputs("GRU", lengths=[4, 2, 3], direction="bidirectional")
    Y, Y_h = create_operator("GRU", direction="bidirectional").forward(*inputs)
    assert np.all(Y[2:, :, 1] == 0) and np.all(Y[3:, :, 2] == 0)
    np.testing.assert_array_equal(Y_h[0, 1], Y[1, 0, 1])   # forward: last valid step
    np.testing.assert_array_equal(Y_h[1, 1], Y[0, 1, 1])   # reverse: its first step


# -- backward: finite differences -------------------------------------------------------
GRAD_CASES = [
    (dict(), {}),
    (dict(direction="bidirectional", initial=True, layout=1), {"layout": 1}),
    (dict(direction="reverse", lengths=[3, 1, 2], initial=True), {}),
    (dict(lengths=[2, 3, 1], initial=True, peepholes=True), {"clip": 1.2}),
    (dict(initial=True), {"activations": "alpha"}),
    (dict(initial=True), {"linear_before_reset": 1}),
    (dict(initial=True, peepholes=True), {"input_forget": 1}),
]


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("case,extra", GRAD_CASES)
def test_backward_finite_differences(op_type, case, extra):
    if (case.get("peepholes") or "input_forget" in extra) and op_type != "LSTM":
        case = {k: v for k, v in case.items() if k != "peepholes"}
        if "input_forget" in extra:
            pytest.skip("LSTM only")
    if "linear_before_reset" in extra and op_type != "GRU":
        pytest.skip("GRU only")
    attributes = ort_attributes(op_type, extra)
    if "direction" in case:
        attributes["direction"] = case["direction"]
    op = create_operator(op_type, **attributes)
    inputs = make_inputs(op_type, seq=3, batch=3, **case)
    grads = op.backward([np.ones_like(o) for o in op.forward(*inputs)], inputs,
                        list(op.forward(*inputs)))
    assert len(grads) == len(inputs)
    assert len(grads) <= 4 or grads[4] is None   # sequence_lens
    check_gradient(op, inputs)


def test_backward_float32_matches_float64():
    inputs = make_inputs("LSTM", initial=True, peepholes=True, lengths=[4, 2, 3])
    op = create_operator("LSTM")
    outs64 = op.forward(*inputs)
    up = [np.ones_like(o) for o in outs64]
    g64 = op.backward(up, inputs, list(outs64))
    inputs32 = [x.astype(np.float32) if x is not None and x.dtype.kind == "f" else x
                for x in inputs]
    g32 = op.backward([u.astype(np.float32) for u in up], inputs32,
                      list(op.forward(*inputs32)))
    for a, b in zip(g32, g64):
        if b is not None:
            assert a.dtype == np.float32
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


# -- bad input --------------------------------------------------------------------------
def test_bad_inputs():
    inputs = make_inputs("LSTM")
    with pytest.raises(ShapeError, match="X must be 3-D"):
        create_operator("LSTM").forward(inputs[0][0], *inputs[1:])
    with pytest.raises(ShapeError, match="W must have shape"):
        create_operator("LSTM").forward(inputs[0], inputs[1][:, :5], *inputs[2:])
    with pytest.raises(ShapeError, match="hidden_size=4"):
        create_operator("LSTM", hidden_size=4).forward(*inputs)
    with pytest.raises(UnsupportedError, match="direction"):
        create_operator("GRU", direction="sideways").forward(*make_inputs("GRU"))
    with pytest.raises(UnsupportedError, match="unknown activation"):
        create_operator("RNN", activations=["Swish"]).forward(*make_inputs("RNN"))
    with pytest.raises(ShapeError, match="per direction"):
        create_operator("GRU", activations=["Tanh"]).forward(*make_inputs("GRU"))
    with pytest.raises(ShapeError, match="sequence_lens"):
        create_operator("RNN").forward(*make_inputs("RNN", lengths=[5, 1, 1]))
    with pytest.raises(ShapeError, match="dtype"):
        bad = make_inputs("RNN")
        create_operator("RNN").forward(bad[0].astype(np.float32), *bad[1:])
    with pytest.raises(Deep500Error, match="no attributes"):
        create_operator("RNN", linear_before_reset=1)


# -- end to end: a model torch.onnx.export wrote, inference and backprop ----------------
# torch's gate blocks in ONNX's order: LSTM (i, f, g, o) -> (i, o, f, c); GRU (r, z, n)
# -> (z, r, h); RNN has one block.
TORCH_GATE_ORDER = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2], "RNN": [0]}


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
def test_torch_export_inference_and_backprop(op_type, tmp_path):
    torch = pytest.importorskip("torch")
    import io

    import deep500.frameworks.reference as d5ref
    from deep500.lv1_network import gradient_name

    torch.manual_seed(0)
    layer = getattr(torch.nn, op_type)(3, 4, batch_first=True, bidirectional=True)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = layer

        def forward(self, x):
            y, state = self.rnn(x)
            h = state[0] if op_type == "LSTM" else state
            return y, (y ** 2).mean() + (h ** 3).sum()

    model, x = Model(), torch.randn(2, 5, 3)
    stream = io.BytesIO()
    with pytest.warns(Warning):   # the TorchScript exporter's deprecation warning
        torch.onnx.export(model, (x,), stream, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y", "loss"])
    proto = onnx.load_from_string(stream.getvalue())
    node = next(n for n in proto.graph.node if n.op_type == op_type)
    results = d5ref.from_onnx(proto).inference_and_backprop({"x": x.numpy()}, "loss")
    y, loss = model(x)
    loss.backward()
    np.testing.assert_allclose(results["y"], y.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results["loss"], loss.item(), rtol=1e-5)
    order = TORCH_GATE_ORDER[op_type]

    def onnx_layout(name):   # torch's (blocks·H, ...) gradients of both directions
        grads = [getattr(layer, name + suffix).grad.numpy() for suffix in ("", "_reverse")]
        return np.stack([np.concatenate([g.reshape(len(order), -1, *g.shape[1:])[k]
                                         for k in order]) for g in grads])
    expected = {1: onnx_layout("weight_ih_l0"), 2: onnx_layout("weight_hh_l0"),
                3: np.concatenate([onnx_layout("bias_ih_l0"), onnx_layout("bias_hh_l0")],
                                  axis=1)}
    for position, want in expected.items():
        got = results[gradient_name(node.input[position])]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6,
                                   err_msg=f"{op_type} input {position}")
