"""The PyTorch executor's control flow (``deep500/frameworks/pytorch/ops/control.py``):
Loop, If and Scan whose bodies read main-graph parameters from the outer scope.
Forward against onnx's ReferenceEvaluator where it implements the case (its Loop runs
no iteration without ``cond`` and its Scan only forward along axis 0), against NumPy
otherwise; gradients of the parameters against central finite differences of the
executor's own forward pass, in float64."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import onnx  # noqa: E402
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import deep500.frameworks.pytorch as d5pt  # noqa: E402
from deep500.frameworks.pytorch.onnx_module import OnnxModule  # noqa: E402
from deep500.lv1_network import gradient_name  # noqa: E402
from deep500.utils.errors import ModelError  # noqa: E402

D = TP.DOUBLE
# float64 forward passes of the same formulas in another order: a few ulp per step.
FORWARD_TOL = dict(rtol=1e-12, atol=1e-12)
# Central differences with step h: truncation O(h^2 f''') ~ 1e-12 and roundoff
# O(eps |f| / h) ~ 1e-10 for losses of order 1; the recurrences keep f''' of order 1.
STEP = 1e-6
GRAD_TOL = dict(rtol=1e-6, atol=1e-8)


def value(name, shape, elem=D):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, initializers, opset=17):
    graph = helper.make_graph(nodes, "control_flow", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in
                               initializers.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(proto)
    return proto


def weighted_loss(outputs: dict, nodes: list, inputs: list) -> list:
    """Nodes adding ``loss = sum_i sum(output_i * r_i)`` with fed weights ``r_i``
    (random, so that no gradient vanishes by symmetry)."""
    terms = []
    for name, shape in outputs.items():
        inputs.append(value(f"r_{name}", shape))
        nodes += [helper.make_node("Mul", [name, f"r_{name}"], [f"m_{name}"]),
                  helper.make_node("ReduceSum", [f"m_{name}"], [f"s_{name}"],
                                   keepdims=0)]
        terms.append(f"s_{name}")
    nodes.append(helper.make_node("Sum", terms, ["loss"]))
    return [value("loss", [])]


def check_forward(proto, feed, names, expected=None):
    got = d5pt.from_onnx(proto).inference(feed)
    if expected is None:
        expected = dict(zip(names, ReferenceEvaluator(proto).run(names, feed)))
    for name in names:
        assert got[name].shape == np.shape(expected[name]), name
        np.testing.assert_allclose(got[name], expected[name], err_msg=name,
                                   **FORWARD_TOL)
    return got


def check_gradients(proto, feed, params):
    """Every element of each parameter's gradient against central differences."""
    executor = d5pt.from_onnx(proto)
    network = executor.network
    got = executor.inference_and_backprop(feed, "loss")
    for param in params:
        base = network.fetch_tensor(param).copy()
        grad = got[gradient_name(param)]
        assert np.linalg.norm(grad) > 0, f"the gradient of {param} vanishes"
        numeric = np.zeros_like(base)
        for index in np.ndindex(base.shape):
            losses = []
            for sign in (1, -1):
                shifted = base.copy()
                shifted[index] += sign * STEP
                network.feed_tensor(param, shifted)
                losses.append(float(executor.inference(feed)["loss"]))
            numeric[index] = (losses[0] - losses[1]) / (2 * STEP)
        network.feed_tensor(param, base)
        np.testing.assert_allclose(grad, numeric, err_msg=param, **GRAD_TOL)


def rand(rng, *shape):
    return rng.standard_normal(shape)


# -- Loop ----------------------------------------------------------------------------
T, B, DIN, H = 4, 2, 3, 3


def rnn_loop(opset=17):
    """h_t = tanh(x_t W + h_{t-1} U) as a Loop over M = T steps with cond true: the
    body reads x (computed in the main graph, read by nothing else), W and U from the
    outer scope; h is carried, the batch mean of h_t is a scan output."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["xt"]),
         helper.make_node("MatMul", ["xt", "W"], ["a"]),
         helper.make_node("MatMul", ["h", "U"], ["b"]),
         helper.make_node("Add", ["a", "b"], ["s"]),
         helper.make_node("Tanh", ["s"], ["h2"]),
         helper.make_node("Identity", ["c"], ["c2"]),
         helper.make_node("ReduceMean", ["h2"], ["m"], axes=[0], keepdims=0)],
        "body", [value("i", [], TP.INT64), value("c", [], TP.BOOL), value("h", [B, H])],
        [value("c2", [], TP.BOOL), value("h2", [B, H]), value("m", [H])])
    nodes = [helper.make_node("Mul", ["x_in", "scale"], ["x"]),
             helper.make_node("Loop", ["M", "cond", "h0"], ["h_final", "means"],
                              body=body)]
    inputs = [value("x_in", [T, B, DIN]), value("h0", [B, H])]
    outputs = weighted_loss({"h_final": [B, H], "means": [T, H]}, nodes, inputs)
    rng = np.random.default_rng(0)
    inits = {"W": rand(rng, DIN, H) * 0.5, "U": rand(rng, H, H) * 0.5,
             "scale": np.array(1.5), "M": np.array(T, np.int64),
             "cond": np.array(True)}
    feed = {"x_in": rand(rng, T, B, DIN), "h0": rand(rng, B, H),
            "r_h_final": rand(rng, B, H), "r_means": rand(rng, T, H)}
    proto = model(nodes, inputs, outputs + [value("h_final", [B, H]),
                                            value("means", [T, H])], inits, opset)
    return proto, feed


def test_loop_forward_matches_reference():
    proto, feed = rnn_loop()
    check_forward(proto, feed, ["h_final", "means", "loss"])


def test_loop_gradients_reach_outer_scope_parameters():
    proto, feed = rnn_loop()
    check_gradients(proto, feed, ["W", "U", "scale"])


def counting_loop(trip, cond, body_cond_node, carried=np.array([0.0])):
    """y += i + 1 each iteration; the body's condition is ``body_cond_node``'s ``c2``
    (from y2, the new y); scan output: y2."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=D),
         helper.make_node("Add", ["fi", "one"], ["step"]),
         helper.make_node("Add", ["y", "step"], ["y2"]),
         body_cond_node,
         helper.make_node("Identity", ["y2"], ["ys"])],
        "body", [value("i", [], TP.INT64), value("c", [], TP.BOOL), value("y", [1])],
        [value("c2", [], TP.BOOL), value("y2", [1]), value("ys", [1])],
        [numpy_helper.from_array(np.array(1.0), "one"),
         numpy_helper.from_array(np.array([10.0]), "limit")])
    names = ["M" if trip is not None else "", "cond" if cond is not None else "", "y0"]
    inits = {k: v for k, v in (("M", trip), ("cond", cond)) if v is not None}
    return model([helper.make_node("Loop", names, ["y", "ys"], body=body)],
                 [value("y0", [1])], [value("y", [1]), value("ys", [None, 1])], inits), \
        {"y0": carried}


def test_loop_with_trip_count_only_ignores_the_body_condition():
    false = helper.make_node("Less", ["limit", "y2"], ["c2"])  # false at first
    proto, feed = counting_loop(np.array(3, np.int64), None, false)
    check_forward(proto, feed, ["y", "ys"], {"y": [6.0], "ys": [[1.0], [3.0], [6.0]]})


def test_loop_with_condition_only_is_a_while_loop():
    below = helper.make_node("Less", ["y2", "limit"], ["c2"])
    proto, feed = counting_loop(None, np.array(True), below)
    # y: 1, 3, 6, 10 (10 < 10 is false: the loop stops after the fourth iteration)
    check_forward(proto, feed, ["y", "ys"],
                  {"y": [10.0], "ys": [[1.0], [3.0], [6.0], [10.0]]})


def test_loop_of_zero_iterations_has_empty_scan_outputs_of_the_declared_shape():
    below = helper.make_node("Less", ["y2", "limit"], ["c2"])
    proto, feed = counting_loop(np.array(0, np.int64), np.array(True), below,
                                np.array([5.0]))
    check_forward(proto, feed, ["y", "ys"], {"y": [5.0], "ys": np.zeros((0, 1))})


def test_loop_with_only_a_trip_count_has_only_scan_outputs():
    """Loop(M, "") with no carried values."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c2"]),
         helper.make_node("Mul", ["i", "i"], ["square"])], "body",
        [value("i", [], TP.INT64), value("c", [], TP.BOOL)],
        [value("c2", [], TP.BOOL), value("square", [], TP.INT64)])
    proto = model([helper.make_node("Loop", ["M", ""], ["squares"], body=body)],
                  [value("M", [], TP.INT64)], [value("squares", [None], TP.INT64)], {})
    check_forward(proto, {"M": np.array(4)}, ["squares"], {"squares": [0, 1, 4, 9]})


def test_loop_without_trip_count_or_condition_is_refused():
    below = helper.make_node("Less", ["y2", "limit"], ["c2"])
    proto, _ = counting_loop(None, None, below)
    with pytest.raises(ModelError, match="never ends"):
        d5pt.from_onnx(proto)


def test_loop_carries_a_sequence_through():
    """A sequence is a Loop-carried value like a tensor (a list of tensors here)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c2"]),
         helper.make_node("Identity", ["s"], ["s2"])], "body",
        [value("i", [], TP.INT64), value("c", [], TP.BOOL),
         helper.make_tensor_sequence_value_info("s", D, None)],
        [value("c2", [], TP.BOOL), helper.make_tensor_sequence_value_info("s2", D, None)])
    nodes = [helper.make_node("Loop", ["M", "", "empty"], ["seq"], body=body)]
    proto = model(nodes, [helper.make_tensor_sequence_value_info("empty", D, None)],
                  [helper.make_tensor_sequence_value_info("seq", D, None)],
                  {"M": np.array(2, np.int64)})
    x = np.arange(6.0).reshape(2, 3)
    result = d5pt.from_onnx(proto).inference({"empty": [x, x[:1]]})["seq"]
    assert isinstance(result, list) and len(result) == 2
    np.testing.assert_array_equal(result[0], x)
    np.testing.assert_array_equal(result[1], x[:1])


# -- If ------------------------------------------------------------------------------
def if_model():
    """then: (x * W, x); else: (W - x, W * W), x and W from the outer scope."""
    then_branch = helper.make_graph(
        [helper.make_node("Mul", ["x", "W"], ["t1"]),
         helper.make_node("Identity", ["x"], ["t2"])], "then", [],
        [value("t1", [3]), value("t2", [3])])
    else_branch = helper.make_graph(
        [helper.make_node("Sub", ["W", "x"], ["e1"]),
         helper.make_node("Mul", ["W", "W"], ["e2"])], "else", [],
        [value("e1", [3]), value("e2", [3])])
    nodes = [helper.make_node("Tanh", ["x_in"], ["x"]),
             helper.make_node("If", ["cond"], ["o1", "o2"], then_branch=then_branch,
                              else_branch=else_branch)]
    inputs = [value("cond", [], TP.BOOL), value("x_in", [3])]
    outputs = weighted_loss({"o1": [3], "o2": [3]}, nodes, inputs)
    rng = np.random.default_rng(1)
    feed = {"x_in": rand(rng, 3), "r_o1": rand(rng, 3), "r_o2": rand(rng, 3)}
    return model(nodes, inputs, outputs + [value("o1", [3]), value("o2", [3])],
                 {"W": rand(rng, 3)}), feed


@pytest.mark.parametrize("cond", [True, False])
def test_if_forward_matches_reference(cond):
    proto, feed = if_model()
    check_forward(proto, {**feed, "cond": np.array(cond)}, ["o1", "o2", "loss"])


@pytest.mark.parametrize("cond", [True, False])
def test_if_gradients_reach_outer_scope_parameters(cond):
    proto, feed = if_model()
    check_gradients(proto, {**feed, "cond": np.array(cond)}, ["W"])


def test_if_with_a_known_condition_builds_only_the_branch_taken():
    proto, feed = if_model()
    graph = proto.graph
    cond = [i for i in graph.input if i.name == "cond"][0]
    graph.input.remove(cond)
    graph.initializer.append(numpy_helper.from_array(np.array(False), "cond"))
    executor = d5pt.from_onnx(proto)
    bodies = [m for m in executor.network.module.children() if isinstance(m, OnnxModule)]
    assert len(bodies) == 1
    check_forward(proto, feed, ["o1", "o2", "loss"])


# -- Scan ----------------------------------------------------------------------------
def scan_model(reverse_axes: bool):
    """s_t = tanh(s_{t-1} + x_t W + v_t) with x (T, DIN) and v, both scanned, W read
    from the outer scope; scan outputs s_t and s_t * s_t. With ``reverse_axes``: x is
    given as (DIN, T) and scanned along axis -1, v is scanned backwards, and the first
    scan output is stacked along axis 1 in reverse."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["xt", "W"], ["a"]),
         helper.make_node("Add", ["s", "a"], ["b"]),
         helper.make_node("Add", ["b", "vt"], ["c"]),
         helper.make_node("Tanh", ["c"], ["s2"]),
         helper.make_node("Identity", ["s2"], ["out1"]),
         helper.make_node("Mul", ["s2", "s2"], ["out2"])],
        "body", [value("s", [H]), value("xt", [DIN]), value("vt", [H])],
        [value("s2", [H]), value("out1", [H]), value("out2", [H])])
    attributes = dict(num_scan_inputs=2)
    x_shape, out1_shape = [T, DIN], [T, H]
    if reverse_axes:
        attributes.update(scan_input_axes=[-1, 0], scan_input_directions=[0, 1],
                          scan_output_axes=[1, 0], scan_output_directions=[1, 0])
        x_shape, out1_shape = [DIN, T], [H, T]
    nodes = [helper.make_node("Scan", ["s0", "x", "v"], ["s", "out1", "out2"],
                              body=body, **attributes)]
    inputs = [value("s0", [H]), value("x", x_shape), value("v", [T, H])]
    outputs = weighted_loss({"s": [H], "out1": out1_shape, "out2": [T, H]}, nodes, inputs)
    rng = np.random.default_rng(2)
    feed = {"s0": rand(rng, H), "x": rand(rng, *x_shape), "v": rand(rng, T, H),
            "r_s": rand(rng, H), "r_out1": rand(rng, *out1_shape),
            "r_out2": rand(rng, T, H)}
    proto = model(nodes, inputs, outputs + [value("s", [H]), value("out1", out1_shape),
                                            value("out2", [T, H])],
                  {"W": rand(rng, DIN, H) * 0.5})
    return proto, feed


def scan_expected(feed, W, reverse_axes):
    """The NumPy loop of :func:`scan_model`."""
    x = feed["x"].T if reverse_axes else feed["x"]
    v = feed["v"][::-1] if reverse_axes else feed["v"]
    s, out1, out2 = feed["s0"], [], []
    for t in range(T):
        s = np.tanh(s + x[t] @ W + v[t])
        out1.append(s)
        out2.append(s * s)
    out1 = np.stack(out1[::-1], 1) if reverse_axes else np.stack(out1)
    return {"s": s, "out1": out1, "out2": np.stack(out2)}


def test_scan_forward_matches_reference():
    proto, feed = scan_model(False)
    got = check_forward(proto, feed, ["s", "out1", "out2", "loss"])
    W = numpy_helper.to_array(proto.graph.initializer[0])
    for name, want in scan_expected(feed, W, False).items():
        np.testing.assert_allclose(got[name], want, **FORWARD_TOL)


def test_scan_axes_and_directions():
    proto, feed = scan_model(True)
    W = numpy_helper.to_array(proto.graph.initializer[0])
    check_forward(proto, feed, ["s", "out1", "out2"], scan_expected(feed, W, True))


@pytest.mark.parametrize("reverse_axes", [False, True])
def test_scan_gradients_reach_outer_scope_parameters(reverse_axes):
    proto, feed = scan_model(reverse_axes)
    check_gradients(proto, feed, ["W"])


def test_scan8_batches_and_pads_shorter_sequences_with_zeros():
    """Opset 8: batch axis 0, scan axis 1, ``directions``; the second sequence has
    length 2 of 3 and is scanned backwards over its first two steps (as onnxruntime)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]),
         helper.make_node("Identity", ["s2"], ["o"])], "body",
        [value("s", [2], TP.FLOAT), value("x", [2], TP.FLOAT)],
        [value("s2", [2], TP.FLOAT), value("o", [2], TP.FLOAT)])
    node = helper.make_node("Scan", ["lens", "init", "xs"], ["final", "outs"],
                            body=body, num_scan_inputs=1, directions=[1])
    proto = model([node], [value("lens", [2], TP.INT64), value("init", [2, 2], TP.FLOAT),
                           value("xs", [2, 3, 2], TP.FLOAT)],
                  [value("final", [2, 2], TP.FLOAT), value("outs", [2, 3, 2], TP.FLOAT)],
                  {}, opset=8)
    xs = np.arange(1, 13, dtype=np.float32).reshape(2, 3, 2)
    feed = {"lens": np.array([3, 2]), "init": np.zeros((2, 2), np.float32), "xs": xs}
    want = {"final": [[9, 12], [16, 18]],
            "outs": [[[5, 6], [8, 10], [9, 12]], [[9, 10], [16, 18], [0, 0]]]}
    check_forward(proto, feed, ["final", "outs"],
                  {k: np.array(v, np.float32) for k, v in want.items()})


# -- nesting and rebuilding ------------------------------------------------------------
def nested_model():
    """A Loop whose body holds an If that reads the main graph's W two scopes up:
    y <- y * W if i is even, y + W otherwise."""
    then_branch = helper.make_graph([helper.make_node("Mul", ["y", "W"], ["t"])],
                                    "then", [], [value("t", [3])])
    else_branch = helper.make_graph([helper.make_node("Add", ["y", "W"], ["e"])],
                                    "else", [], [value("e", [3])])
    body = helper.make_graph(
        [helper.make_node("Mod", ["i", "two"], ["r"]),
         helper.make_node("Equal", ["r", "zero"], ["even"]),
         helper.make_node("If", ["even"], ["y2"], then_branch=then_branch,
                          else_branch=else_branch),
         helper.make_node("Identity", ["c"], ["c2"])],
        "body", [value("i", [], TP.INT64), value("c", [], TP.BOOL), value("y", [3])],
        [value("c2", [], TP.BOOL), value("y2", [3])],
        [numpy_helper.from_array(np.array(2, np.int64), "two"),
         numpy_helper.from_array(np.array(0, np.int64), "zero")])
    nodes = [helper.make_node("Loop", ["M", "cond", "y0"], ["y"], body=body)]
    inputs = [value("y0", [3])]
    outputs = weighted_loss({"y": [3]}, nodes, inputs)
    rng = np.random.default_rng(3)
    proto = model(nodes, inputs, outputs + [value("y", [3])],
                  {"W": rand(rng, 3), "M": np.array(5, np.int64), "cond": np.array(True)})
    return proto, {"y0": rand(rng, 3), "r_y": rand(rng, 3)}


def test_nested_bodies_forward_and_gradients():
    proto, feed = nested_model()
    check_forward(proto, feed, ["y", "loss"])
    check_gradients(proto, feed, ["W"])


def test_rebuilding_replaces_the_bodies():
    proto, feed = rnn_loop()
    executor = d5pt.from_onnx(proto)
    before = executor.inference(feed)["loss"]
    network = executor.network
    network.build()
    network.build()
    bodies = [m for m in network.module.children() if isinstance(m, OnnxModule)]
    assert len(bodies) == 1
    np.testing.assert_array_equal(executor.inference(feed)["loss"], before)


def test_graph_edits_schedule_a_loop_after_its_outer_scope_reads():
    """Removing the producer of x (read only by the Loop's body) and adding it back
    appends it after the Loop; the rebuilt order must run it first."""
    from deep500.utils.onnx_interop.schemas import operator_class
    proto, feed = rnn_loop()
    executor = d5pt.from_onnx(proto)
    before = executor.inference(feed)["loss"]
    network = executor.network
    producer = next(op for op in network.operations if op.outputs == ["x"])
    network.remove_node(producer.name)
    network.add_node(operator_class("Mul")("rescale", ["x_in", "scale"], ["x"]))
    order = [op.name for op in network.operations]
    loop = next(op.name for op in network.operations if op.op_type == "Loop")
    assert order.index("rescale") < order.index(loop)
    np.testing.assert_array_equal(executor.inference(feed)["loss"], before)


@pytest.mark.slow
def test_compiled_module_runs_the_loop_eagerly_between_compiled_regions():
    proto, feed = rnn_loop()
    eager = d5pt.from_onnx(proto).inference_and_backprop(feed, "loss")
    compiled = d5pt.from_onnx(proto, compile=True).inference_and_backprop(feed, "loss")
    for name in ("loss", gradient_name("W"), gradient_name("U")):
        np.testing.assert_allclose(compiled[name], eager[name], err_msg=name,
                                   **FORWARD_TOL)
