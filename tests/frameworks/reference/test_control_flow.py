"""The reference executor's control flow (Loop, If, Scan): forward against onnxruntime
(an independent implementation of the same spec; onnx's own ReferenceEvaluator joins a
Loop's scan outputs with np.vstack, which concatenates rather than stacks slices of rank
two or more), backward against
central finite differences of the loss in float64, including the gradients of
outer-scope tensors the bodies read (the nodes' implicit inputs)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500 as d5
import deep500.frameworks.reference as d5ref
from deep500.utils.errors import Deep500Error

onnxruntime = pytest.importorskip("onnxruntime")

DOUBLE = TensorProto.DOUBLE
# Central differences in float64 with step 1e-6: truncation error ~ eps² |f'''| ~ 1e-12,
# round-off ~ 1e-16 |loss| / eps ~ 1e-10 for losses of order one.
EPS = 1e-6
TOL = dict(rtol=1e-6, atol=1e-8)


def _info(name, elem=DOUBLE, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _const(name, value):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(value), name))


def _model(nodes, inputs, outputs, initializers, opset=17):
    """A model whose output ``Y...`` are reduced to the scalar ``loss`` = Σ C_k ⊙ Y_k with
    fixed random weights C_k, so that every element of every output gets a gradient."""
    rng = np.random.default_rng(11)
    nodes, terms = list(nodes), []
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()]
    for name, shape in outputs:
        nodes += [helper.make_node("Mul", [name, f"C_{name}"], [f"P_{name}"]),
                  helper.make_node("ReduceSum", [f"P_{name}"], [f"S_{name}"], keepdims=0)]
        inits.append(numpy_helper.from_array(rng.standard_normal(shape), f"C_{name}"))
        terms.append(f"S_{name}")
    nodes.append(helper.make_node("Sum", terms, ["loss"]))
    graph_outputs = [_info(n, DOUBLE, s) for n, s in outputs] + [_info("loss", DOUBLE, [])]
    graph = helper.make_graph(nodes, "control_flow", inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _check(model, feed, outputs, wrt):
    """Forward equals onnxruntime's; the gradients of the parameters ``wrt``
    equal central differences of the loss."""
    executor = d5ref.from_onnx(model)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    want = session.run(outputs + ["loss"], feed)
    got = executor.inference(feed)
    for name, value in zip(outputs + ["loss"], want):
        np.testing.assert_allclose(got[name], value, rtol=1e-12, atol=1e-12, err_msg=name)
    grads = executor.inference_and_backprop(feed, "loss")
    network = executor.network
    for param in wrt:
        w = network.fetch_tensor(param)
        numeric = np.zeros_like(w)
        for index in np.ndindex(w.shape):
            old = w[index]
            w[index] = old + EPS
            plus = float(executor.inference(feed)["loss"])
            w[index] = old - EPS
            minus = float(executor.inference(feed)["loss"])
            w[index] = old
            numeric[index] = (plus - minus) / (2 * EPS)
        np.testing.assert_allclose(grads[d5.gradient_name(param)], numeric, **TOL,
                                   err_msg=param)
    return executor, grads


# -- Loop ---------------------------------------------------------------------------
def _rnn_body(with_counter=True):
    """h ← tanh(X[i]·W + h·U); an integer counter carried too; scan output h."""
    nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Gather", ["Xs", "i"], ["x_t"], axis=0),
             helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
             helper.make_node("MatMul", ["h_in", "U"], ["hu"]),
             helper.make_node("Add", ["xw", "hu"], ["pre"]),
             helper.make_node("Tanh", ["pre"], ["h_out"]),
             helper.make_node("Identity", ["h_out"], ["h_scan"])]
    inputs = [_info("i", TensorProto.INT64, []), _info("cond_in", TensorProto.BOOL, []),
              _info("h_in", DOUBLE, None)]
    outputs = [_info("cond_out", TensorProto.BOOL, []), _info("h_out", DOUBLE, None)]
    if with_counter:
        nodes += [_const("one", np.int64(1)), helper.make_node("Add", ["k_in", "one"], ["k_out"])]
        inputs.append(_info("k_in", TensorProto.INT64, []))
        outputs.append(_info("k_out", TensorProto.INT64, []))
    return helper.make_graph(nodes, "rnn_body", inputs, outputs + [_info("h_scan", DOUBLE, None)])


def _rnn_params(rng, T=4, B=2, D=3, H=3):
    return {"W": rng.standard_normal((D, H)) * 0.5, "U": rng.standard_normal((H, H)) * 0.5,
            "h0": rng.standard_normal((B, H)) * 0.5, "M": np.array(T, np.int64),
            "k0": np.array(0, np.int64), "true": np.array(True)}


def test_loop_carried_state_scan_output_and_outer_scope_weights_match_finite_differences():
    rng = np.random.default_rng(0)
    params = _rnn_params(rng)
    # The body reads Xs, an intermediate tensor of the main graph, and the weights W and U
    # from the outer scope: they are the Loop's implicit inputs.
    nodes = [helper.make_node("Sin", ["X"], ["Xs"]),
             helper.make_node("Loop", ["M", "true", "h0", "k0"], ["hT", "kT", "hs"],
                              body=_rnn_body())]
    model = _model(nodes, [_info("X", DOUBLE, [4, 2, 3])], [("hT", [2, 3]), ("hs", [4, 2, 3])],
                   params)
    feed = {"X": rng.standard_normal((4, 2, 3))}
    executor, grads = _check(model, feed, ["hT", "hs"], ["W", "U", "h0"])
    executor.network.add_output("kT")
    assert executor.inference(feed)["kT"] == 4
    plan = executor.plan()
    index = next(i for i, s in enumerate(plan.steps) if s.op.op_type == "Loop")
    assert set(plan.steps[index].inputs) == {"M", "true", "h0", "k0", "Xs", "W", "U"}
    assert "Xs" in plan.frees[index]   # freed after the Loop, its last reader


def test_loop_backward_without_tapes_recomputes_the_same_gradients():
    rng = np.random.default_rng(7)
    params = _rnn_params(rng)
    nodes = [helper.make_node("Sin", ["X"], ["Xs"]),
             helper.make_node("Loop", ["M", "true", "h0", "k0"], ["hT", "kT", "hs"],
                              body=_rnn_body())]
    model = _model(nodes, [_info("X", DOUBLE, [4, 2, 3])], [("hT", [2, 3]), ("hs", [4, 2, 3])],
                   params)
    step = next(s for s in d5ref.from_onnx(model).plan().steps if s.op.op_type == "Loop")
    values = {**params, "Xs": np.sin(rng.standard_normal((4, 2, 3)))}
    args = [values[name] for name in step.inputs]
    loop = step.forward.__self__
    outputs = list(loop.forward(*args))
    upstream = [rng.standard_normal((2, 3)), None, rng.standard_normal((4, 2, 3))]
    taped = list(loop.forward_taped(*args))
    for got, want in zip(taped, outputs):
        np.testing.assert_array_equal(got, want)
    recomputed = loop.backward(upstream, args, outputs)
    kept = loop.backward(upstream + [None], args, taped)
    assert [name for name, g in zip(step.inputs, kept) if g is not None] == \
        ["h0", "Xs", "W", "U"]
    for a, b in zip(recomputed, kept):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)


def test_loop_backward_uses_the_forward_pass_it_follows():
    # Dropout without a seed draws a new mask on every call: the gradient must use the
    # mask of the forward pass whose loss it differentiates, not a recomputed one.
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Dropout", ["h_in", "ratio", "true"], ["h_out"])], "body",
        [_info("i", TensorProto.INT64, []), _info("cond_in", TensorProto.BOOL, []),
         _info("h_in", DOUBLE, [64])],
        [_info("cond_out", TensorProto.BOOL, []), _info("h_out", DOUBLE, [64])])
    params = {"h0": np.ones(64), "M": np.array(1, np.int64), "true": np.array(True),
              "ratio": np.array(0.5)}
    model = _model([helper.make_node("Loop", ["M", "true", "h0"], ["Y"], body=body)], [],
                   [("Y", [64])], params)
    executor = d5ref.from_onnx(model)
    weights = executor.network.fetch_tensor("C_Y")
    for _ in range(3):
        out = executor.inference_and_backprop({}, "loss")
        np.testing.assert_array_equal(out[d5.gradient_name("h0")], weights * out["Y"])


def test_loop_stops_when_the_body_condition_fails():
    rng = np.random.default_rng(1)
    params = _rnn_params(rng, T=10)
    body = _rnn_body(with_counter=False)
    # cond_out = i + 1 < 3: three iterations although M = 10.
    body.node.remove(body.node[0])
    body.node.extend([_const("three", np.int64(3)), _const("one", np.int64(1)),
                      helper.make_node("Add", ["i", "one"], ["next"]),
                      helper.make_node("Less", ["next", "three"], ["cond_out"])])
    nodes = [helper.make_node("Sin", ["X"], ["Xs"]),
             helper.make_node("Loop", ["M", "true", "h0"], ["hT", "hs"], body=body)]
    del params["k0"]
    model = _model(nodes, [_info("X", DOUBLE, [10, 2, 3])], [("hT", [2, 3]), ("hs", [3, 2, 3])],
                   params)
    feed = {"X": rng.standard_normal((10, 2, 3))}
    executor, _ = _check(model, feed, ["hT", "hs"], ["W", "U", "h0"])
    assert executor.inference(feed)["hs"].shape == (3, 2, 3)


def test_loop_in_a_loop_differentiates_the_outermost_weights():
    rng = np.random.default_rng(2)
    # Inner: h ← tanh(h·U) twice; outer: h ← inner(h) + W, three times.
    inner = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("MatMul", ["g_in", "U"], ["gu"]),
         helper.make_node("Tanh", ["gu"], ["g_out"])], "inner",
        [_info("j", TensorProto.INT64, []), _info("c_in", TensorProto.BOOL, []),
         _info("g_in", DOUBLE, None)],
        [_info("c_out", TensorProto.BOOL, []), _info("g_out", DOUBLE, None)])
    outer = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Loop", ["two", "", "h_in"], ["g"], body=inner),
         helper.make_node("Add", ["g", "W"], ["h_out"])], "outer",
        [_info("i", TensorProto.INT64, []), _info("cond_in", TensorProto.BOOL, []),
         _info("h_in", DOUBLE, None)],
        [_info("cond_out", TensorProto.BOOL, []), _info("h_out", DOUBLE, None)])
    params = {"U": rng.standard_normal((3, 3)) * 0.5, "W": rng.standard_normal((1, 3)),
              "two": np.array(2, np.int64), "M": np.array(3, np.int64),
              "true": np.array(True)}
    nodes = [helper.make_node("Loop", ["M", "true", "X"], ["hT"], body=outer)]
    model = _model(nodes, [_info("X", DOUBLE, [2, 3])], [("hT", [2, 3])], params)
    _check(model, {"X": rng.standard_normal((2, 3))}, ["hT"], ["U", "W"])


def test_loop_without_trip_count_or_condition_is_refused():
    body = _rnn_body(with_counter=False)
    nodes = [helper.make_node("Sin", ["X"], ["Xs"]),
             helper.make_node("Loop", ["", "", "h0"], ["hT", "hs"], body=body)]
    params = _rnn_params(np.random.default_rng(3))
    del params["k0"]
    model = _model(nodes, [_info("X", DOUBLE, [4, 2, 3])], [("hT", [2, 3]), ("hs", [4, 2, 3])],
                   params)
    with pytest.raises(Deep500Error, match="neither the trip count M nor cond"):
        d5ref.from_onnx(model).inference({"X": np.zeros((4, 2, 3))})


# -- If -------------------------------------------------------------------------------
@pytest.mark.parametrize("cond", [True, False])
def test_if_differentiates_the_branch_taken(cond):
    rng = np.random.default_rng(4)
    then_branch = helper.make_graph(
        [helper.make_node("Mul", ["Xs", "A"], ["t"]), helper.make_node("Tanh", ["t"], ["y_t"])],
        "then", [], [_info("y_t", DOUBLE, None)])
    else_branch = helper.make_graph(
        [helper.make_node("Add", ["Xs", "B"], ["e"]), helper.make_node("Sin", ["e"], ["y_e"])],
        "else", [], [_info("y_e", DOUBLE, None)])
    nodes = [helper.make_node("Exp", ["X"], ["Xs"]),
             helper.make_node("If", ["c"], ["Y"], then_branch=then_branch,
                              else_branch=else_branch)]
    params = {"A": rng.standard_normal((2, 3)), "B": rng.standard_normal((2, 3))}
    model = _model(nodes, [_info("X", DOUBLE, [2, 3]), _info("c", TensorProto.BOOL, [])],
                   [("Y", [2, 3])], params)
    feed = {"X": rng.standard_normal((2, 3)), "c": np.array(cond)}
    _, grads = _check(model, feed, ["Y"], ["A", "B"])
    untaken = "B" if cond else "A"
    assert not grads[d5.gradient_name(untaken)].any()


def test_if_branch_returning_its_constant_returns_a_copy():
    then_branch = helper.make_graph([_const("K", np.ones((2, 3)))], "then", [],
                                    [_info("K", DOUBLE, [2, 3])])
    else_branch = helper.make_graph([helper.make_node("Neg", ["A"], ["n"])], "else", [],
                                    [_info("n", DOUBLE, [2, 3])])
    nodes = [helper.make_node("If", ["c"], ["Y"], then_branch=then_branch,
                              else_branch=else_branch)]
    params = {"A": np.arange(6.0).reshape(2, 3)}
    model = _model(nodes, [_info("c", TensorProto.BOOL, [])], [("Y", [2, 3])], params)
    executor, grads = _check(model, {"c": np.array(True)}, ["Y"], ["A"])
    assert not grads[d5.gradient_name("A")].any()
    executor.inference({"c": np.array(True)})["Y"][:] = 5.0
    np.testing.assert_array_equal(executor.inference({"c": np.array(True)})["Y"], 1.0)


# -- Scan ---------------------------------------------------------------------------
def _scan_body():
    """s ← s·U + x·W (state), out = tanh(s) (scan output)."""
    return helper.make_graph(
        [helper.make_node("MatMul", ["s_in", "U"], ["su"]),
         helper.make_node("Mul", ["x", "W"], ["xw"]),
         helper.make_node("Add", ["su", "xw"], ["s_out"]),
         helper.make_node("Tanh", ["s_out"], ["out"])], "scan_body",
        [_info("s_in", DOUBLE, None), _info("x", DOUBLE, None)],
        [_info("s_out", DOUBLE, None), _info("out", DOUBLE, None)])


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir",
                         [(0, 0, 0, 0), (1, 1, 1, 0), (-2, 0, -1, 1), (1, 1, 0, 1)])
def test_scan_axes_and_directions_match_finite_differences(in_axis, in_dir, out_axis, out_dir):
    rng = np.random.default_rng(5)
    T, H = 4, 3
    x_shape = [T, H] if in_axis % 2 == 0 else [H, T]
    out_shape = [T, H] if out_axis % 2 == 0 else [H, T]
    nodes = [helper.make_node("Scan", ["s0", "Xp"], ["sT", "outs"], body=_scan_body(),
                              num_scan_inputs=1, scan_input_axes=[in_axis],
                              scan_input_directions=[in_dir], scan_output_axes=[out_axis],
                              scan_output_directions=[out_dir])]
    params = {"s0": rng.standard_normal(H), "Xp": rng.standard_normal(x_shape),
              "U": rng.standard_normal((H, H)) * 0.5, "W": rng.standard_normal(H)}
    model = _model(nodes, [], [("sT", [H]), ("outs", out_shape)], params, opset=17)
    _check(model, {}, ["sT", "outs"], ["s0", "Xp", "U", "W"])


def test_scan_opset8_batch_matches_finite_differences():
    rng = np.random.default_rng(6)
    B, T, H = 2, 3, 2
    nodes = [helper.make_node("Scan", ["", "s0", "Xp"], ["sT", "outs"], body=_scan_body(),
                              num_scan_inputs=1, directions=[1])]
    params = {"s0": rng.standard_normal((B, H)), "Xp": rng.standard_normal((B, T, H)),
              "U": rng.standard_normal((H, H)) * 0.5, "W": rng.standard_normal(H)}
    model = _model(nodes, [], [("sT", [B, H]), ("outs", [B, T, H])], params, opset=8)
    _check(model, {}, ["sT", "outs"], ["s0", "Xp", "U", "W"])
