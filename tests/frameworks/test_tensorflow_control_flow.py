"""ONNX control flow on the TensorFlow executor (``deep500/frameworks/tensorflow/
ops/control.py``): Loop, If and Scan models whose outputs must equal
``onnx.reference.ReferenceEvaluator``'s and whose gradients (through
``tf.GradientTape``, with respect to parameters the bodies read from the enclosing
graph) must equal central finite differences, in float64, in both executor modes."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

tf = pytest.importorskip("tensorflow")

import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.lv1_network import gradient_name  # noqa: E402

OPSET = 21
MODES = ("eager", "function")
DOUBLE = TensorProto.DOUBLE
# Forward: float64 kernels of two libraries, a few dozen operations in another order.
FORWARD_TOL = dict(rtol=1e-10, atol=1e-12)
# Central differences with step 1e-6 on float64: truncation error ~ step² · |f'''| and
# round-off ~ 1e-16 · |f| / step, both below 1e-8 for these losses of size ~10.
STEP = 1e-6
GRADIENT_TOL = dict(rtol=1e-6, atol=1e-7)


def _value(name, elem_type=DOUBLE, shape=None):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _constant(name, value):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(value), name))


def _model(name, nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k)
                               for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


def _loss(nodes, terms):
    """Append ``loss`` = sum of ReduceSum over ``terms`` ((name, squared) pairs)."""
    sums = []
    for index, (name, squared) in enumerate(terms):
        source = name
        if squared:
            source = f"{name}_squared"
            nodes.append(helper.make_node("Mul", [name, name], [source]))
        sums.append(f"loss_term{index}")
        nodes.append(helper.make_node("ReduceSum", [source], [sums[-1]], keepdims=0))
    nodes.append(helper.make_node("Sum", sums, ["loss"]))


# -- models ---------------------------------------------------------------------------
def rnn_loop():
    """A tanh RNN as a Loop over time: the trip count from Shape(x), the hidden state
    loop-carried from the parameter h0, the states stacked as a scan output, and the
    input x and the weights W, U read by the body from the enclosing graph."""
    body = helper.make_graph([
        helper.make_node("Gather", ["x", "i"], ["x_t"], axis=0),
        helper.make_node("MatMul", ["x_t", "W"], ["a"]),
        helper.make_node("MatMul", ["h", "U"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_next"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Identity", ["h_next"], ["h_scan"]),
    ], "rnn_body", [_value("i", TensorProto.INT64, []), _value("cond_in", TensorProto.BOOL, []),
                    _value("h", shape=[5])],
        [_value("cond_out", TensorProto.BOOL, []), _value("h_next", shape=[5]),
         _value("h_scan", shape=[5])])
    nodes = [helper.make_node("Shape", ["x"], ["time"], start=0, end=1),
             helper.make_node("Squeeze", ["time"], ["trip"]),
             helper.make_node("Loop", ["trip", "go", "h0"], ["h_final", "hs"], body=body)]
    _loss(nodes, [("hs", True), ("h_final", False)])
    rng = np.random.default_rng(0)
    params = {"W": rng.standard_normal((3, 5)) * 0.5, "U": rng.standard_normal((5, 5)) * 0.5,
              "h0": rng.standard_normal(5) * 0.5, "go": np.array(True)}
    model = _model("rnn_loop", nodes, [_value("x", shape=[4, 3])],
                   [_value("h_final", shape=[5]), _value("hs", shape=[4, 5]),
                    _value("loss", shape=[])], params)
    return model, [{"x": rng.standard_normal((4, 3))}]


def while_loop():
    """A Loop whose condition is computed from the data (a traced function cannot know
    it: tf.while_loop): s ← 1.5·s + b while sum(s) < 20, at most 10 times."""
    body = helper.make_graph([
        _constant("k", 1.5), _constant("limit", 20.0),
        helper.make_node("Mul", ["s", "k"], ["scaled"]),
        helper.make_node("Add", ["scaled", "b"], ["s_next"]),
        helper.make_node("ReduceSum", ["s_next"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
        helper.make_node("Identity", ["s_next"], ["s_scan"]),
    ], "while_body", [_value("i", TensorProto.INT64, []),
                      _value("cond_in", TensorProto.BOOL, []), _value("s", shape=[2])],
        [_value("cond_out", TensorProto.BOOL, []), _value("s_next", shape=[2]),
         _value("s_scan", shape=[2])])
    nodes = [helper.make_node("Loop", ["trip", "go", "s0"], ["s_final", "ss"], body=body)]
    _loss(nodes, [("ss", False), ("s_final", True)])
    model = _model("while_loop", nodes, [_value("s0", shape=[2])],
                   [_value("s_final", shape=[2]), _value("ss", shape=["iterations", 2]),
                    _value("loss", shape=[])],
                   {"b": np.array([0.2, 0.1]), "trip": np.array(10, np.int64),
                    "go": np.array(True)})
    # 7 iterations (sum 23.3 > 20 after the 7th) and 5 (from a larger start)
    return model, [{"s0": np.array([0.3, 0.5])}, {"s0": np.array([1.0, 1.5])}]


def growing_loop():
    """A Loop-carried value that grows every iteration (Concat), with a data-dependent
    condition: the traced tf.while_loop needs relaxed shape invariants."""
    body = helper.make_graph([
        helper.make_node("Concat", ["acc", "step"], ["acc_next"], axis=0),
        helper.make_node("ReduceSum", ["acc_next"], ["total"], keepdims=0),
        _constant("limit", 4.25),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
    ], "grow_body", [_value("i", TensorProto.INT64, []),
                     _value("cond_in", TensorProto.BOOL, []), _value("acc", shape=["n"])],
        [_value("cond_out", TensorProto.BOOL, []), _value("acc_next", shape=["m"])])
    nodes = [helper.make_node("Loop", ["", "go", "start"], ["acc_final"], body=body)]
    model = _model("growing_loop", nodes, [_value("start", shape=[1]), _value("step", shape=[1])],
                   [_value("acc_final", shape=["k"])], {"go": np.array(True)})
    return model, [{"start": np.array([0.5]), "step": np.array([0.7])},
                   {"start": np.array([3.9]), "step": np.array([0.2])}]


def if_model():
    """If(sum(x) > 0): then W·x, else V ⊙ x; both branches read x and a parameter from
    the enclosing graph."""
    then_branch = helper.make_graph([helper.make_node("MatMul", ["W", "x"], ["then_y"])],
                                    "then", [], [_value("then_y", shape=[3])])
    else_branch = helper.make_graph([helper.make_node("Mul", ["x", "V"], ["else_y"])],
                                    "else", [], [_value("else_y", shape=[3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             _constant("zero", 0.0),
             helper.make_node("Greater", ["total", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_branch,
                              else_branch=else_branch)]
    _loss(nodes, [("y", True)])
    rng = np.random.default_rng(1)
    model = _model("if_model", nodes, [_value("x", shape=[3])],
                   [_value("y", shape=[3]), _value("loss", shape=[])],
                   {"W": rng.standard_normal((3, 3)), "V": rng.standard_normal(3)})
    return model, [{"x": np.array([0.5, 1.0, -0.2])}, {"x": np.array([-0.5, 0.3, -0.9])}]


def scan_model(plain: bool = False):
    """Scan (opset 16) over axis 1 of x (N, T, D) in reverse and axis 0 of y (T,), the
    state from the parameter s0, the weight W read from the enclosing graph, outputs
    stacked along axis 1 and along the last axis in reverse. ``plain``: the same body
    with every axis 0 and every direction forward (what onnx's ReferenceEvaluator
    implements), for :func:`_scan_oracle`."""
    body = helper.make_graph([
        helper.make_node("MatMul", ["x_t", "W"], ["a"]),
        helper.make_node("Mul", ["s", "y_t"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["s_next"]),
        helper.make_node("Identity", ["s_next"], ["o1"]),
        _constant("axis", np.array([1], np.int64)),
        helper.make_node("ReduceSum", ["s_next", "axis"], ["o2"], keepdims=0),
    ], "scan_body", [_value("s", shape=[2, 5]), _value("x_t", shape=[2, 3]),
                     _value("y_t", shape=[])],
        [_value("s_next", shape=[2, 5]), _value("o1", shape=[2, 5]), _value("o2", shape=[2])])
    layout = {} if plain else dict(scan_input_axes=[1, 0], scan_input_directions=[1, 0],
                                   scan_output_axes=[1, -1], scan_output_directions=[0, 1])
    nodes = [helper.make_node("Scan", ["s0", "x", "y"], ["s_final", "o1s", "o2s"], body=body,
                              num_scan_inputs=2, **layout)]
    _loss(nodes, [("o1s", True), ("o2s", False), ("s_final", False)])
    rng = np.random.default_rng(2)
    x_shape, o1_shape, o2_shape = ([4, 2, 3], [4, 2, 5], [4, 2]) if plain else (
        [2, 4, 3], [2, 4, 5], [2, 4])
    model = _model("scan_model", nodes, [_value("x", shape=x_shape), _value("y", shape=[4])],
                   [_value("s_final", shape=[2, 5]), _value("o1s", shape=o1_shape),
                    _value("o2s", shape=o2_shape), _value("loss", shape=[])],
                   {"s0": rng.standard_normal((2, 5)) * 0.5,
                    "W": rng.standard_normal((3, 5)) * 0.5})
    return model, [{"x": rng.standard_normal((2, 4, 3)), "y": rng.standard_normal(4)}]


def _scan_oracle(feed):
    """:func:`scan_model`'s outputs from onnx's ReferenceEvaluator on the plain twin:
    x read along axis 1 in reverse is the plain scan of x moved to axis 0 and reversed;
    o1s stacked along axis 1 is the plain one moved there; o2s stacked along the last
    axis in reverse is the plain one reversed, then moved there."""
    plain, _ = scan_model(plain=True)
    x = np.moveaxis(feed["x"], 1, 0)[::-1]
    want = _oracle(plain, {"x": np.ascontiguousarray(x), "y": feed["y"]})
    want["o1s"] = np.moveaxis(want["o1s"], 0, 1)
    want["o2s"] = np.moveaxis(want["o2s"][::-1], 0, -1)
    return want


def nested_model():
    """A Loop whose body holds an If (even iterations tanh(h·W), odd ones k ⊙ h): the
    If's branches read W and k from the main graph, two scopes out."""
    then_branch = helper.make_graph([helper.make_node("MatMul", ["h", "W"], ["hw"]),
                                     helper.make_node("Tanh", ["hw"], ["then_h"])],
                                    "then", [], [_value("then_h", shape=[2, 4])])
    else_branch = helper.make_graph([helper.make_node("Mul", ["h", "k"], ["else_h"])],
                                    "else", [], [_value("else_h", shape=[2, 4])])
    body = helper.make_graph([
        _constant("two", np.array(2, np.int64)), _constant("nought", np.array(0, np.int64)),
        helper.make_node("Mod", ["i", "two"], ["parity"]),
        helper.make_node("Equal", ["parity", "nought"], ["even"]),
        helper.make_node("If", ["even"], ["h_next"], then_branch=then_branch,
                         else_branch=else_branch),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], "nested_body", [_value("i", TensorProto.INT64, []),
                       _value("cond_in", TensorProto.BOOL, []), _value("h", shape=[2, 4])],
        [_value("cond_out", TensorProto.BOOL, []), _value("h_next", shape=[2, 4])])
    nodes = [helper.make_node("Loop", ["trip", "go", "h0"], ["h_final"], body=body)]
    _loss(nodes, [("h_final", True)])
    rng = np.random.default_rng(3)
    model = _model("nested_model", nodes, [_value("h0", shape=[2, 4])],
                   [_value("h_final", shape=[2, 4]), _value("loss", shape=[])],
                   {"W": rng.standard_normal((4, 4)) * 0.5, "k": rng.standard_normal(4),
                    "trip": np.array(5, np.int64), "go": np.array(True)})
    return model, [{"h0": rng.standard_normal((2, 4))}]


MODELS = {"rnn_loop": rnn_loop, "while_loop": while_loop, "if": if_model,
          "scan": scan_model, "nested": nested_model}


# -- checks ---------------------------------------------------------------------------
# onnx's ReferenceEvaluator (1.23) deviates from the spec for Loop (an omitted cond stops
# it before the first iteration; scan elements of rank 0 or 2 and more go through
# np.vstack, which does not stack them) and implements Scan with axes 0 and forward
# directions only: the models here give Loop a cond and rank-1 scan elements (the
# other cases are test_loop_without_cond_stacks_per_iteration's), and Scan's oracle is
# its plain twin (_scan_oracle).
def _oracle(model, feed):
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feed)))


def _finite_differences(executor, feed) -> dict:
    """Central differences of ``loss`` with respect to every parameter."""
    network = executor.network
    gradients = {}
    for name in network.get_params():
        value = network.fetch_tensor(name).copy()
        gradient = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            losses = []
            for sign in (1, -1):
                moved = value.copy()
                moved[index] += sign * STEP
                network.feed_tensor(name, moved, is_param=True)
                losses.append(float(executor.inference(feed)["loss"]))
            gradient[index] = (losses[0] - losses[1]) / (2 * STEP)
        network.feed_tensor(name, value, is_param=True)
        gradients[name] = gradient
    return gradients


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(MODELS) + ["growing_loop"])
def test_forward_matches_onnx_reference(name, mode):
    model, feeds = (MODELS.get(name) or growing_loop)()
    executor = d5tf.from_onnx(model, mode=mode)
    for feed in feeds:
        want = _scan_oracle(feed) if name == "scan" else _oracle(model, feed)
        got = executor.inference(feed)
        for output, value in want.items():
            assert got[output].shape == value.shape, (name, output)
            np.testing.assert_allclose(got[output], value, **FORWARD_TOL,
                                       err_msg=f"{name}, {output}, {mode}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_match_finite_differences(name, mode):
    model, feeds = MODELS[name]()
    executor = d5tf.from_onnx(model, mode=mode)
    params = executor.network.get_params()
    assert params
    for feed in feeds:
        got = executor.inference_and_backprop(feed, "loss")
        want = _finite_differences(executor, feed)
        for param in params:
            assert np.linalg.norm(want[param]) > 0 or name == "if", (name, param)
            np.testing.assert_allclose(got[gradient_name(param)], want[param], **GRADIENT_TOL,
                                       err_msg=f"{name}, d loss / d {param}, {mode}")


def _traced_op_types(executor) -> set[str]:
    return {op.type for function in executor._traced._functions.values()
            for op in function.graph.get_operations()}


@pytest.mark.parametrize("name,kinds", [("while_loop", {"While", "StatelessWhile"}),
                                        ("growing_loop", {"While", "StatelessWhile"}),
                                        ("if", {"If", "StatelessIf"})])
def test_traced_data_dependent_control_flow(name, kinds):
    """A traced function of a Loop or If whose condition depends on the data holds a
    While or If (not one trace per outcome), and one trace serves every feed."""
    model, feeds = (MODELS.get(name) or growing_loop)()
    executor = d5tf.from_onnx(model, mode="function")
    for feed in feeds:
        executor.inference(feed)
    assert executor.trace_count == 1
    assert _traced_op_types(executor) & kinds


def test_traced_static_loop_is_unrolled():
    """A Loop whose trip count comes from shapes is unrolled in the trace: the counter
    stays a constant, so shape arithmetic on it is static."""
    model, feeds = rnn_loop()
    executor = d5tf.from_onnx(model, mode="function")
    executor.inference(feeds[0])
    assert not _traced_op_types(executor) & {"While", "StatelessWhile"}


def test_parameter_read_by_a_body_stays_in_onnx_layout():
    """W feeds Gemm(transB=1), which would store it transposed, and a Loop body, which
    reads it by name in ONNX's layout: it must stay untransposed."""
    body = helper.make_graph([
        _constant("axes", np.array([1], np.int64)),
        helper.make_node("ReduceSum", ["W", "axes"], ["row_sums"], keepdims=0),
        helper.make_node("Add", ["h", "row_sums"], ["h_next"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], "body", [_value("i", TensorProto.INT64, []), _value("cond_in", TensorProto.BOOL, []),
                _value("h", shape=[2, 4])],
        [_value("cond_out", TensorProto.BOOL, []), _value("h_next", shape=[2, 4])])
    nodes = [helper.make_node("Gemm", ["x", "W"], ["z"], transB=1),
             helper.make_node("Loop", ["trip", "go", "z"], ["out"], body=body)]
    rng = np.random.default_rng(4)
    model = _model("layout", nodes, [_value("x", shape=[2, 3])], [_value("out", shape=[2, 4])],
                   {"W": rng.standard_normal((4, 3)), "trip": np.array(2, np.int64),
                    "go": np.array(True)})
    feed = {"x": rng.standard_normal((2, 3))}
    for mode in MODES:
        got = d5tf.from_onnx(model, mode=mode).inference(feed)["out"]
        np.testing.assert_allclose(got, _oracle(model, feed)["out"], **FORWARD_TOL)


def test_node_producing_an_outer_read_is_scheduled_first():
    """A node whose output only a body reads runs before the Loop, also when it was
    added to the network after the Loop."""
    model, feeds = rnn_loop()
    # U is computed by a node (Identity of a stored U0) that only the body reads.
    graph = model.graph
    for tensor in graph.initializer:
        if tensor.name == "U":
            tensor.name = "U0"
    graph.node.insert(0, helper.make_node("Identity", ["U0"], ["U"], name="make_U"))
    executor = d5tf.from_onnx(model)
    network = executor.network
    op = next(o for o in network.operations if o.name == "make_U")
    network.remove_node("make_U")
    network.add_node(op)
    assert network.operations[-1].name == "make_U"
    got = executor.inference(feeds[0])
    np.testing.assert_allclose(got["hs"], _oracle(model, feeds[0])["hs"], **FORWARD_TOL)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("cond", [True, False])
def test_sequence_valued_branches(cond, mode):
    """If branches returning sequences (Python lists, ops/sequence.py): the chosen
    branch's tensor comes out of SequenceAt; a traced function reads the condition when
    it is traced, since it decides the structure of the result."""
    seq = helper.make_tensor_sequence_value_info
    then_branch = helper.make_graph([_constant("a", np.array([1.0])),
                                     helper.make_node("SequenceConstruct", ["a"], ["then_s"])],
                                    "then", [], [seq("then_s", DOUBLE, [1])])
    else_branch = helper.make_graph([_constant("b", np.array([2.0])),
                                     helper.make_node("SequenceConstruct", ["b"], ["else_s"])],
                                    "else", [], [seq("else_s", DOUBLE, [1])])
    nodes = [helper.make_node("If", ["cond"], ["s"], then_branch=then_branch,
                              else_branch=else_branch),
             _constant("zero", np.array(0, np.int64)),
             helper.make_node("SequenceAt", ["s", "zero"], ["y"])]
    model = _model("sequence_if", nodes, [_value("cond", TensorProto.BOOL, [])],
                   [_value("y", shape=[1])], {})
    got = d5tf.from_onnx(model, mode=mode).inference({"cond": np.array(cond)})
    np.testing.assert_array_equal(got["y"], [1.0 if cond else 2.0])


def test_loop_without_cond_stacks_per_iteration():
    """Loop(M, "", h0) runs M iterations whatever the body's condition says (the spec's
    table: 'cond ... ignored'), and stacks rank-2 and rank-0 scan elements along a new
    axis 0 (the spec's user_defined_vals[i] = user_defined_val)."""
    body = helper.make_graph([
        helper.make_node("Cast", ["i"], ["i_float"], to=DOUBLE),
        helper.make_node("Mul", ["h", "k"], ["scaled"]),
        helper.make_node("Add", ["scaled", "i_float"], ["h_next"]),
        helper.make_node("ReduceSum", ["h_next"], ["total"], keepdims=0),
        _constant("stop", np.array(False)),
    ], "body", [_value("i", TensorProto.INT64, []), _value("cond_in", TensorProto.BOOL, []),
                _value("h", shape=[2, 3])],
        [_value("stop", TensorProto.BOOL, []), _value("h_next", shape=[2, 3]),
         _value("h_next", shape=[2, 3]), _value("total", shape=[])])
    nodes = [helper.make_node("Loop", ["trip", "", "h0"], ["h_final", "hs", "totals"],
                              body=body)]
    model = _model("no_cond", nodes, [_value("h0", shape=[2, 3])],
                   [_value("h_final", shape=[2, 3]), _value("hs", shape=[3, 2, 3]),
                    _value("totals", shape=[3])],
                   {"k": np.array(0.5), "trip": np.array(3, np.int64)})
    h0 = np.arange(6.0).reshape(2, 3)
    states = [h0]
    for i in range(3):
        states.append(states[-1] * 0.5 + i)
    hs = np.stack(states[1:])
    for mode in MODES:
        got = d5tf.from_onnx(model, mode=mode).inference({"h0": h0})
        np.testing.assert_allclose(got["h_final"], states[-1], **FORWARD_TOL)
        np.testing.assert_allclose(got["hs"], hs, **FORWARD_TOL)
        np.testing.assert_allclose(got["totals"], hs.sum(axis=(1, 2)), **FORWARD_TOL)


# float32 backward passes of a 6-step GRU computed by two graphs (Keras' own and the
# ONNX Loop tf2onnx makes of it): relative L2 of the gradients, as in
# tests/lv1_network/test_exported_sequence_models.py.
KERAS_GRADIENT_RTOL = 1e-4


def test_keras_gru_loop_trains_like_keras(tmp_path):
    """Keras 3's GRU, which tf2onnx converts to a Loop whose body reads the input from
    the main graph and carries the weights: the executor's gradients equal those
    GradientTape computes on the Keras model itself (weights matched by shape)."""
    keras = pytest.importorskip("keras")
    pytest.importorskip("tf2onnx")
    from deep500.utils.onnx_interop.losses import add_loss
    from tests.lv1_network.exported_models import KERAS_SEQUENCE_MODELS, keras_sequence
    path, inputs, expected = keras_sequence(tmp_path, "gru", seed=0)
    (output, logits), = expected.items()
    keras.utils.set_random_seed(0)   # the exporter's seed: the same weights
    model = KERAS_SEQUENCE_MODELS["gru"][0](keras)
    x = inputs["input"]
    np.testing.assert_allclose(np.asarray(model(x)), logits, rtol=1e-6)
    labels = np.arange(len(x), dtype=np.int64) % logits.shape[1]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels, model(x)))
    grads = tape.gradient(loss, model.trainable_variables)
    want = {tuple(v.shape): np.asarray(g) for v, g in zip(model.trainable_variables, grads)}
    assert len(want) == len(grads)   # shapes tell the weights apart
    onnx_model = add_loss(onnx.load(str(path)), "softmax_cross_entropy", output=output)
    for mode in MODES:
        executor = d5tf.from_onnx(onnx_model, mode=mode)
        got = executor.inference_and_backprop({"input": x, "labels": labels}, "loss")
        np.testing.assert_allclose(got["loss"], float(loss), rtol=1e-5)
        matched = 0
        for param in executor.network.get_params():
            shape = executor.network.fetch_tensor(param).shape
            if shape in want:
                gradient = got[gradient_name(param)]
                error = np.linalg.norm(gradient - want[shape]) / np.linalg.norm(want[shape])
                assert error <= KERAS_GRADIENT_RTOL, (mode, param, error)
                matched += 1
        assert matched == len(want), mode
