"""The TensorFlow executor's attention, normalization, recurrent and resampling operators
(``deep500/frameworks/tensorflow/ops/<family>.py``): one-node ONNX models whose outputs
must equal ``onnx.reference.ReferenceEvaluator``'s and Deep500's reference executor's,
and whose gradients (through ``tf.GradientTape``, the recurrent ones through time) must
equal the reference executor's backward."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

tf = pytest.importorskip("tensorflow")

import deep500.frameworks.reference as d5ref  # noqa: E402
import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.frameworks.reference.operators.registry import create_operator  # noqa: E402
from deep500.lv1_network import gradient_name  # noqa: E402
from deep500.utils.errors import Deep500Error  # noqa: E402

OPSET = 27
# Forward: float32 kernels of two libraries differ by a few ulps summed over a few dozen
# terms (matmuls, reductions); float16 by a few of its 2**-11 ulps.
TOL = {np.dtype(np.float32): dict(rtol=1e-4, atol=1e-5),
       np.dtype(np.float16): dict(rtol=5e-3, atol=5e-3),
       np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12)}
# Gradients of float64 models: the same formulas in another order of summation.
GRAD_TOL = dict(rtol=1e-8, atol=1e-10)


def _info(name, value):
    value = np.asarray(value)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                         value.shape)


def _names(inputs):
    return ["" if x is None else f"x{i}" for i, x in enumerate(inputs)]


# onnx's ReferenceEvaluator deviates from the spec here (onnx 1.23): its LRN sums over
# the window of the batch index instead of the channel's, its LpNormalization takes no
# absolute value for p=1, its RNN, GRU and LSTM handle neither reverse directions, layout
# 1, sequence_lens nor activations such as Relu; the reference executor's operator is
# the oracle for these.
ONNX_ORACLE_DEVIATES = ("LRN", "LpNormalization", "RNN", "GRU", "LSTM")


def _reference_operator(op_type, inputs, attrs, n_outputs):
    outputs = create_operator(op_type, **attrs).forward(*inputs)
    outputs = [outputs] if isinstance(outputs, np.ndarray) else list(outputs)
    return outputs[:n_outputs]


def oracle(op_type, inputs, attrs, n_outputs):
    """ONNX's ReferenceEvaluator on the one-node model (an independent implementation);
    the reference executor's operator where onnx's lacks the case (stash_type other than
    float, float64 function bodies) or deviates from the spec."""
    if attrs.get("stash_type", 1) != 1 or op_type in ONNX_ORACLE_DEVIATES:
        return _reference_operator(op_type, inputs, attrs, n_outputs)
    names = _names(inputs)
    node = helper.make_node(op_type, names, [f"y{i}" for i in range(n_outputs)], **attrs)
    graph = helper.make_graph(
        [node], "oracle", [_info(n, x) for n, x in zip(names, inputs) if n],
        [helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.UNDEFINED, None)
         for i in range(n_outputs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs) if n}
    try:
        return ReferenceEvaluator(model).run(None, feeds)
    except (onnx.reference.op_run.RuntimeTypeError,  # a float32 constant, float64 body
            ValueError):                               # ConvTranspose with groups
        return _reference_operator(op_type, inputs, attrs, n_outputs)


def one_node(op_type, inputs, attrs, expected, const=(), params=(), loss=False):
    """A model of one ``op_type`` node. Inputs at positions ``const`` are constant
    initializers, at ``params`` trainable ones, the others graph inputs; with ``loss``, a
    scalar ``loss = Σ_i ReduceSum(y_i · w_i)`` over the float outputs follows."""
    names = _names(inputs)
    outputs = [f"y{i}" for i in range(len(expected))]
    nodes = [helper.make_node(op_type, names, outputs, **attrs)]
    initializers = [numpy_helper.from_array(np.asarray(x), n)
                    for i, (n, x) in enumerate(zip(names, inputs))
                    if n and (i in const or i in params)]
    graph_inputs = [_info(n, x) for i, (n, x) in enumerate(zip(names, inputs))
                    if n and i not in const and i not in params]
    graph_outputs = [_info(n, y) for n, y in zip(outputs, expected)]
    # Output types as ONNX infers them (the stash type of LayerNormalization's Mean).
    probe = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph(nodes, "probe", graph_inputs, [], initializers),
        ir_version=10, opset_imports=[helper.make_opsetid("", OPSET)]))
    inferred = {v.name: v.type.tensor_type.elem_type for v in probe.graph.value_info}
    dtypes = [helper.tensor_dtype_to_np_dtype(inferred[n]) if inferred.get(n)
              else np.asarray(y).dtype for n, y in zip(outputs, expected)]
    graph_outputs = [_info(n, np.asarray(y).astype(t))
                     for n, y, t in zip(outputs, expected, dtypes)]
    if loss:
        terms = []
        for i, (y, dtype) in enumerate(zip(expected, dtypes)):
            y = np.asarray(y)
            w = np.random.default_rng(5 + i).standard_normal(y.shape).astype(dtype)
            initializers.append(numpy_helper.from_array(w, f"w{i}"))
            nodes += [helper.make_node("Mul", [f"y{i}", f"w{i}"], [f"m{i}"]),
                      helper.make_node("ReduceSum", [f"m{i}"], [f"s{i}"], keepdims=0)]
            terms.append(f"s{i}")
        for i, dtype in enumerate(dtypes):
            if dtype != dtypes[0]:
                nodes.append(helper.make_node("Cast", [terms[i]], [f"c{i}"],
                                              to=helper.np_dtype_to_tensor_dtype(dtypes[0])))
                terms[i] = f"c{i}"
        nodes.append(helper.make_node("Sum", terms, ["loss"]))
        graph_outputs.append(helper.make_tensor_value_info(
            "loss", helper.np_dtype_to_tensor_dtype(np.dtype(dtypes[0])), []))
    graph = helper.make_graph(nodes, op_type.lower(), graph_inputs, graph_outputs,
                              initializers)
    model = helper.make_model(graph, ir_version=10,
                              opset_imports=[helper.make_opsetid("", OPSET)])
    feeds = {n: np.asarray(x) for i, (n, x) in enumerate(zip(names, inputs))
             if n and i not in const and i not in params}
    return model, feeds


# onnx's evaluator computes with attribute values as float32 scalars (epsilon, alpha,
# the constants of its function bodies), so in float64 it agrees to float32 rounding.
ONNX_FLOAT64_TOL = dict(rtol=1e-6, atol=1e-9)


def assert_same(got, want, what, tol=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got.astype(want.dtype), want, err_msg=what,
                                   equal_nan=True, **(tol or TOL[want.dtype]))
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_forward(op_type, inputs, attrs=None, n_outputs=1, const=(), mode="eager",
                  reference=True):
    """The TensorFlow executor's outputs equal ONNX's evaluator's and (``reference``)
    the reference executor's."""
    attrs = attrs or {}
    expected = oracle(op_type, inputs, attrs, n_outputs)
    model, feeds = one_node(op_type, inputs, attrs, expected, const)
    got = d5tf.from_onnx(model, mode=mode).inference(feeds)
    ref = d5ref.from_onnx(model).inference(feeds) if reference else {}
    for i, want in enumerate(expected):
        assert_same(got[f"y{i}"], want, f"{op_type} output {i} vs onnx",
                    ONNX_FLOAT64_TOL if np.asarray(want).dtype == np.float64 else None)
        if reference:
            assert_same(got[f"y{i}"], ref[f"y{i}"], f"{op_type} output {i} vs reference")
    return got


def check_gradients(op_type, inputs, attrs=None, params=(0,), const=(), n_outputs=1,
                    tol=GRAD_TOL):
    """Gradients of ``Σ ReduceSum(y_i · w_i)`` w.r.t. the float64 inputs at ``params``
    equal the reference executor's."""
    attrs = attrs or {}
    expected = oracle(op_type, inputs, attrs, n_outputs)
    model, feeds = one_node(op_type, inputs, attrs, expected, const, params, loss=True)
    got = d5tf.from_onnx(model).inference_and_backprop(feeds, "loss")
    want = d5ref.from_onnx(model).inference_and_backprop(feeds, "loss")
    np.testing.assert_allclose(got["loss"], want["loss"], **tol)
    for name in [f"x{i}" for i in params]:
        g = np.asarray(got[gradient_name(name)])
        assert np.all(np.isfinite(g)), (op_type, name)
        np.testing.assert_allclose(g, want[gradient_name(name)], err_msg=f"{op_type} d/{name}",
                                   **tol)


def normal(*shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def uniform(low, high, *shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def i64(values):
    return np.asarray(values, np.int64)


def f32(inputs):
    return [x.astype(np.float32) if isinstance(x, np.ndarray) and x.dtype == np.float64
            else x for x in inputs]


# -- attention -----------------------------------------------------------------------------
def _qkv(batch, q_heads, kv_heads, q_len, kv_len, size, three_d=False, seed=0):
    q = normal(batch, q_heads, q_len, size, seed=seed)
    k = normal(batch, kv_heads, kv_len, size, seed=seed + 1)
    v = normal(batch, kv_heads, kv_len, size + 1, seed=seed + 2)
    if three_d:
        q, k, v = (x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)
                   for x in (q, k, v))
    return [q, k, v]


ATTENTION = [  # (id, inputs, attributes, outputs)
    ("4d", _qkv(2, 3, 3, 4, 5, 8), {}, 1),
    ("3d_gqa", _qkv(2, 4, 2, 3, 5, 4, three_d=True), {"q_num_heads": 4, "kv_num_heads": 2}, 1),
    ("causal_past", _qkv(1, 2, 2, 3, 3, 4) + [None, normal(1, 2, 2, 4, seed=7),
                                              normal(1, 2, 2, 5, seed=8)],
     {"is_causal": 1, "qk_matmul_output_mode": 3}, 4),
    ("float_mask_softcap_scale", _qkv(2, 2, 2, 3, 4, 4) + [normal(3, 4, seed=9)],
     {"softcap": 2.0, "scale": 0.25, "qk_matmul_output_mode": 1}, 4),
    ("bool_mask_short", _qkv(1, 2, 1, 3, 5, 4) + [np.array([[True, False, True, True]] * 3)],
     {"qk_matmul_output_mode": 2}, 4),
    ("fully_masked_row", _qkv(1, 1, 1, 2, 3, 4) + [np.array([[False] * 3, [True] * 3])],
     {}, 1),
]


@pytest.mark.parametrize("case", ATTENTION, ids=[c[0] for c in ATTENTION])
def test_attention_forward_and_gradient(case):
    _, inputs, attrs, n_out = case
    check_forward("Attention", f32(inputs), attrs, n_out)
    check_forward("Attention", inputs, attrs, n_out)
    params = tuple(i for i, x in enumerate(inputs)
                   if x is not None and x.dtype == np.float64)
    check_gradients("Attention", inputs, attrs, params=params, n_outputs=n_out)


def test_attention_nonpad_kv_seqlen_and_function_mode():
    inputs = _qkv(2, 2, 2, 2, 5, 4) + [None, None, None, np.array([3, 5], np.int64)]
    check_forward("Attention", f32(inputs), {"is_causal": 1}, mode="function")


def test_attention_3d_needs_head_counts():
    inputs = f32(_qkv(1, 2, 2, 3, 3, 4, three_d=True))
    expected = [np.zeros((1, 3, 10), np.float32)]
    model, feeds = one_node("Attention", inputs, {}, expected)
    with pytest.raises(Deep500Error, match="q_num_heads"):
        d5tf.from_onnx(model).inference(feeds)


# -- normalizations and activations ----------------------------------------------------
NORMS = [  # (id, operator, inputs, attributes, outputs, gradient inputs)
    ("layernorm_last", "LayerNormalization", [normal(2, 3, 5), normal(5, seed=1),
                                              normal(5, seed=2)], {}, 3, (0, 1, 2)),
    ("layernorm_axis1", "LayerNormalization", [normal(2, 3, 4), normal(3, 4, seed=1)],
     {"axis": 1, "epsilon": 1e-3}, 3, (0, 1)),
    ("rmsnorm", "RMSNormalization", [normal(2, 3, 6), normal(6, seed=1)], {}, 1, (0, 1)),
    ("rmsnorm_axis", "RMSNormalization", [normal(2, 3, 6), normal(3, 6, seed=1)],
     {"axis": -2, "epsilon": 0.1}, 1, (0, 1)),
    ("groupnorm", "GroupNormalization", [normal(2, 4, 3, 3), normal(4, seed=1),
                                         normal(4, seed=2)], {"num_groups": 2}, 1, (0, 1, 2)),
    ("instancenorm", "InstanceNormalization", [normal(2, 3, 4, 2), normal(3, seed=1),
                                               normal(3, seed=2)], {"epsilon": 1e-3}, 1,
     (0, 1, 2)),
    ("mvn", "MeanVarianceNormalization", [normal(2, 3, 4, 2)], {}, 1, (0,)),
    ("mvn_axes", "MeanVarianceNormalization", [normal(2, 3, 4)], {"axes": [1, 2]}, 1, (0,)),
    ("lpnorm_l2", "LpNormalization", [normal(3, 4)], {"axis": 0}, 1, (0,)),
    ("lpnorm_l1", "LpNormalization", [normal(3, 4)], {"p": 1}, 1, (0,)),
    ("lrn", "LRN", [normal(2, 5, 3, 3)], {"size": 3, "alpha": 0.1, "beta": 0.6, "bias": 2.0},
     1, (0,)),
    ("lrn_even", "LRN", [normal(1, 4, 2, 2)], {"size": 2}, 1, (0,)),
    ("gelu", "Gelu", [normal(3, 4)], {}, 1, (0,)),
    ("gelu_tanh", "Gelu", [normal(3, 4)], {"approximate": "tanh"}, 1, (0,)),
    # RotaryEmbedding takes no float64 (its type constraint): float32 only.
    ("rotary_3d", "RotaryEmbedding",
     [normal(2, 3, 8), normal(5, 2, seed=1), normal(5, 2, seed=2),
      np.array([[0, 1, 2], [4, 3, 2]], np.int64)], {"num_heads": 2}, 1, (0, 1, 2)),
    ("rotary_4d_interleaved_partial", "RotaryEmbedding",
     [normal(2, 2, 3, 6), normal(2, 3, 2, seed=1), normal(2, 3, 2, seed=2)],
     {"interleaved": 1, "rotary_embedding_dim": 4}, 1, (0,)),
]


STASHED = ("RMSNormalization", "GroupNormalization")
# LayerNormalization's stash type (of its Mean and InvStdDev) can only be float or
# bfloat16: with float64 inputs, stage one runs in float32 in both executors, whose
# gradients then agree to float32 rounding (2**-24 ≈ 6e-8) amplified by 1/σ.
STASH_FLOAT_GRAD_TOL = dict(rtol=1e-5, atol=1e-6)
# float32 gradients summed over a few dozen terms.
FLOAT32_GRAD_TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", NORMS, ids=[c[0] for c in NORMS])
def test_normalization_forward_and_gradient(case):
    _, op_type, inputs, attrs, n_out, params = case
    check_forward(op_type, f32(inputs), attrs, n_out)
    tol = GRAD_TOL
    if op_type in STASHED:   # float64 throughout (the default stash_type is float)
        attrs = {**attrs, "stash_type": onnx.TensorProto.DOUBLE}
    if op_type == "LayerNormalization":
        tol = STASH_FLOAT_GRAD_TOL
    elif op_type in ("MeanVarianceNormalization", "RotaryEmbedding"):
        # MeanVarianceNormalization's function body has a float constant, so ONNX rejects
        # float64 models of it; RotaryEmbedding's type constraint excludes float64.
        inputs, tol = f32(inputs), FLOAT32_GRAD_TOL
    else:
        check_forward(op_type, inputs, attrs, n_out)
    check_gradients(op_type, inputs, attrs, params=params, n_outputs=n_out, tol=tol)


def test_layernorm_stash_type_float_for_double_input():
    """With the default stash_type, stage one of a float64 LayerNormalization runs in
    float32, and Mean and InvStdDev are float32 (as the spec's type U)."""
    x = normal(2, 3, 5)
    expected = oracle("LayerNormalization", [x.astype(np.float32), normal(5, seed=1)
                                             .astype(np.float32)], {}, 3)
    model, feeds = one_node("LayerNormalization", [x, normal(5, seed=1)], {}, [
        x, expected[1], expected[2]])
    got = d5tf.from_onnx(model).inference(feeds)
    assert got["y1"].dtype == np.float32 and got["y2"].dtype == np.float32
    assert got["y0"].dtype == np.float64
    want = d5ref.from_onnx(model).inference(feeds)
    for name in ("y0", "y1", "y2"):
        np.testing.assert_allclose(got[name], want[name], **TOL[np.dtype(np.float32)])


def test_layernorm_float16_computes_statistics_in_float32():
    x = (normal(2, 64) * 30 + 100).astype(np.float16)
    check_forward("LayerNormalization", [x, np.ones(64, np.float16)], {}, 3, reference=False)


# -- recurrent -----------------------------------------------------------------------------
def _recurrent(gates, seq=4, batch=2, inputs=3, hidden=5, directions=1, layout=0,
               lengths=None, peepholes=False, seed=0):
    x = normal(seq, batch, inputs, seed=seed) if layout == 0 else normal(batch, seq, inputs,
                                                                          seed=seed)
    w = normal(directions, gates * hidden, inputs, seed=seed + 1) * 0.5
    r = normal(directions, gates * hidden, hidden, seed=seed + 2) * 0.5
    b = normal(directions, 2 * gates * hidden, seed=seed + 3) * 0.5
    state = [directions, batch, hidden] if layout == 0 else [batch, directions, hidden]
    h0 = normal(*state, seed=seed + 4)
    values = [x, w, r, b, None if lengths is None else np.array(lengths, np.int32), h0]
    if gates == 4:
        values.append(normal(*state, seed=seed + 5))
        if peepholes:
            values.append(normal(directions, 3 * hidden, seed=seed + 6))
    return values


RECURRENT = [  # (id, operator, inputs, attributes, outputs)
    ("rnn_forward", "RNN", _recurrent(1), {"hidden_size": 5}, 2),
    ("rnn_bidirectional_lengths", "RNN", _recurrent(1, directions=2, lengths=[4, 2]),
     {"hidden_size": 5, "direction": "bidirectional", "activations": ["Relu", "Tanh"]}, 2),
    ("gru_reverse_clip", "GRU", _recurrent(3), {"hidden_size": 5, "direction": "reverse",
                                                "clip": 1.5}, 2),
    ("gru_linear_before_reset_layout1", "GRU", _recurrent(3, layout=1, lengths=[3, 4]),
     {"hidden_size": 5, "linear_before_reset": 1, "layout": 1}, 2),
    ("lstm_bidirectional_peepholes", "LSTM",
     _recurrent(4, directions=2, lengths=[2, 4], peepholes=True),
     {"hidden_size": 5, "direction": "bidirectional"}, 3),
    ("lstm_input_forget_activations", "LSTM", _recurrent(4),
     {"hidden_size": 5, "input_forget": 1, "activations": ["HardSigmoid", "Softsign", "Elu"],
      "activation_alpha": [0.3, 0.9], "activation_beta": [0.4]}, 3),
]


@pytest.mark.parametrize("case", RECURRENT, ids=[c[0] for c in RECURRENT])
def test_recurrent_forward_and_backpropagation_through_time(case):
    _, op_type, inputs, attrs, n_out = case
    check_forward(op_type, f32(inputs), attrs, n_out)
    params = tuple(i for i, x in enumerate(inputs) if x is not None and x.dtype == np.float64)
    check_gradients(op_type, inputs, attrs, params=params, n_outputs=n_out)


# -- resampling and windows ---------------------------------------------------------------
def _resize_inputs(x, roi=None, scales=None, sizes=None):
    """X, roi, scales, sizes; those not given are omitted ('' names)."""
    return [x, None if roi is None else np.asarray(roi, np.float32),
            None if scales is None else np.asarray(scales, np.float32),
            None if sizes is None else i64(sizes)]


RESIZE = [  # (id, inputs, attributes)
    ("nearest_up", _resize_inputs(normal(1, 2, 3, 4), scales=[1, 1, 2, 1.5]),
     {"mode": "nearest"}),
    ("nearest_ceil_asymmetric", _resize_inputs(normal(1, 1, 4, 4), sizes=[1, 1, 3, 7]),
     {"mode": "nearest", "nearest_mode": "ceil",
      "coordinate_transformation_mode": "asymmetric"}),
    ("linear_axes_align", _resize_inputs(normal(2, 3, 5), sizes=[4, 8]),
     {"mode": "linear", "axes": [1, 2], "coordinate_transformation_mode": "align_corners"}),
    ("linear_antialias_down", _resize_inputs(normal(1, 1, 8, 8), scales=[1, 1, 0.4, 0.6]),
     {"mode": "linear", "antialias": 1}),
    ("cubic_exclude_outside", _resize_inputs(normal(1, 1, 4, 5), scales=[1, 1, 1.7, 0.8]),
     {"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}),
    ("crop_and_resize", _resize_inputs(normal(1, 1, 5, 5), roi=[0, 0, -0.2, 0.3, 1, 1, 0.7,
                                                                1.3], sizes=[1, 1, 4, 3]),
     {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": 2.5}),
    ("not_larger", _resize_inputs(normal(1, 1, 4, 6), sizes=[5, 5]),
     {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}),
]


@pytest.mark.parametrize("case", RESIZE, ids=[c[0] for c in RESIZE])
def test_resize_forward_and_gradient(case):
    _, inputs, attrs = case
    if inputs[3] is None:
        inputs = inputs[:3]
    check_forward("Resize", f32(inputs), attrs, const=(1, 2, 3))
    check_forward("Resize", f32(inputs), attrs)   # roi, scales, sizes fed at run time
    check_gradients("Resize", inputs, attrs, const=(1, 2, 3))


def test_resize_traced_with_stored_scales():
    inputs = _resize_inputs(normal(1, 2, 3, 4, dtype=np.float32), scales=[1, 1, 1.5, 0.5])
    check_forward("Resize", inputs[:3], {"mode": "cubic"}, const=(1, 2), mode="function")


def test_resize_uint8_rounds():
    x = np.random.default_rng(3).integers(0, 255, (1, 1, 3, 3)).astype(np.uint8)
    check_forward("Resize", _resize_inputs(x, scales=[1, 1, 1.5, 2])[:3], {"mode": "linear"},
                  const=(1, 2))


CONV_TRANSPOSE = [  # (id, inputs, attributes)
    ("2d_groups_strides_padding", [normal(2, 4, 3, 3), normal(4, 3, 2, 3, seed=1),
                                   normal(6, seed=2)],
     {"group": 2, "strides": [2, 3], "output_padding": [1, 2], "pads": [1, 0, 0, 1]}),
    ("2d_dilations_same", [normal(1, 2, 4, 4), normal(2, 3, 3, 3, seed=1)],
     {"dilations": [2, 1], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("2d_output_shape", [normal(1, 1, 3, 3), normal(1, 2, 3, 3, seed=1)],
     {"strides": [3, 2], "output_shape": [10, 8]}),
    ("1d", [normal(2, 3, 5), normal(3, 2, 3, seed=1), normal(2, seed=2)],
     {"strides": [2], "pads": [1, 2]}),
    ("3d", [normal(1, 2, 2, 3, 2), normal(2, 2, 2, 2, 2, seed=1)],
     {"strides": [1, 2, 1], "dilations": [1, 1, 2]}),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE, ids=[c[0] for c in CONV_TRANSPOSE])
def test_conv_transpose_forward_and_gradient(case):
    _, inputs, attrs = case
    check_forward("ConvTranspose", f32(inputs), attrs)
    check_gradients("ConvTranspose", inputs, attrs, params=tuple(range(len(inputs))))


WINDOWS = [  # (id, operator, inputs, attributes, constant inputs, gradient inputs)
    ("lppool_p2_pads", "LpPool", [uniform(0.5, 2, 1, 2, 5, 5)],
     {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 0, 1]}, (), (0,)),
    ("lppool_p3_dilations_ceil", "LpPool", [uniform(0.5, 2, 1, 1, 7)],
     {"kernel_shape": [2], "p": 3, "dilations": [2], "strides": [2], "ceil_mode": 1}, (),
     (0,)),
    ("col2im", "Col2Im", [normal(2, 2 * 6, 8), i64([4, 5]), i64([2, 3])],
     {"strides": [2, 1], "pads": [0, 1, 1, 0]}, (1, 2), (0,)),
    ("col2im_dilated", "Col2Im", [normal(1, 4, 9), i64([5, 5]), i64([2, 2])],
     {"dilations": [2, 2]}, (1, 2), (0,)),
    ("center_crop_pad", "CenterCropPad", [normal(3, 5, 4), i64([4, 3])], {"axes": [0, 2]},
     (1,), (0,)),
    ("center_crop_pad_all", "CenterCropPad", [normal(3, 5), i64([2, 8])], {}, (1,), (0,)),
]
for _mode in ("nearest", "linear", "cubic"):
    for _padding in ("zeros", "border", "reflection"):
        WINDOWS.append((f"gridsample_{_mode}_{_padding}", "GridSample",
                        [normal(2, 2, 4, 5), uniform(-1.3, 1.3, 2, 3, 2, 2, seed=4)],
                        {"mode": _mode, "padding_mode": _padding,
                         "align_corners": int(_padding == "border")}, (),
                        (0,) if _mode == "nearest" else (0, 1)))
WINDOWS.append(("gridsample_3d_linear", "GridSample",
                [normal(1, 2, 3, 4, 3), uniform(-1, 1, 1, 2, 2, 3, 3, seed=4)], {}, (),
                (0, 1)))


@pytest.mark.parametrize("case", WINDOWS, ids=[c[0] for c in WINDOWS])
def test_windows_forward_and_gradient(case):
    _, op_type, inputs, attrs, const, params = case
    check_forward(op_type, f32(inputs), attrs, const=const)
    check_forward(op_type, f32(inputs), attrs)
    check_gradients(op_type, inputs, attrs, params=params, const=const)


# -- traced (tf.function) mode ------------------------------------------------------------
TRACED = [  # (operator, inputs, attributes, outputs): operand values read at trace time
    ("Resize", _resize_inputs(normal(1, 1, 3, 4), sizes=[1, 1, 5, 2])[:4], {"mode": "linear"},
     1),
    ("LSTM", _recurrent(4, lengths=[3, 4]), {"hidden_size": 5, "direction": "reverse"}, 3),
    ("ConvTranspose", CONV_TRANSPOSE[0][1], CONV_TRANSPOSE[0][2], 1),
    ("Col2Im", WINDOWS[2][2], WINDOWS[2][3], 1),
    ("GridSample", WINDOWS[-1][2], WINDOWS[-1][3], 1),
    ("LayerNormalization", NORMS[0][2], {}, 3),
]


@pytest.mark.parametrize("case", TRACED, ids=[c[0] for c in TRACED])
def test_function_mode(case):
    op_type, inputs, attrs, n_out = case
    check_forward(op_type, f32(inputs), attrs, n_out, mode="function")


# -- linear attention (no reference-executor operator: gradients by finite differences) ---
def finite_difference_check(op_type, inputs, attrs, n_outputs, params, eps=1e-2,
                            directions=2, tol=dict(rel=2e-3, abs=2e-3)):
    """Directional derivatives of the loss along random directions, by central
    differences of inference, against the executor's gradients. LinearAttention takes
    no float64, so in float32: truncation error O(eps²) ≈ 1e-4, rounding error ≈
    6e-8·|loss| / eps ≈ 1e-4 for losses of order 10; a wrong gradient is off by O(1)."""
    expected = oracle(op_type, inputs, attrs, n_outputs)
    model, feeds = one_node(op_type, inputs, attrs, expected, params=params, loss=True)
    executor = d5tf.from_onnx(model)
    result = executor.inference_and_backprop(feeds, "loss")
    network, rng = executor.network, np.random.default_rng(11)
    for name in [f"x{i}" for i in params]:
        original = network.fetch_tensor(name).copy()
        gradient = result[gradient_name(name)]
        for _ in range(directions):
            direction = rng.standard_normal(original.shape).astype(original.dtype)
            network.feed_tensor(name, original + original.dtype.type(eps) * direction)
            plus = executor.inference(feeds)["loss"]
            network.feed_tensor(name, original - original.dtype.type(eps) * direction)
            minus = executor.inference(feeds)["loss"]
            network.feed_tensor(name, original)
            numeric = float((plus - minus) / (2 * eps))
            assert numeric == pytest.approx(float(np.sum(gradient * direction)), **tol), (
                op_type, name)


def _linear(batch=2, steps=3, q_heads=2, kv_heads=2, d_k=3, d_v=4, past=True, seed=0):
    q = normal(batch, steps, q_heads * d_k, seed=seed) * 0.5
    k = normal(batch, steps, kv_heads * d_k, seed=seed + 1) * 0.5
    v = normal(batch, steps, kv_heads * d_v, seed=seed + 2)
    state = normal(batch, kv_heads, d_k, d_v, seed=seed + 3) if past else None
    return [q, k, v, state]


LINEAR = [  # (id, inputs, attributes)
    ("linear", _linear(), {"update_rule": "linear"}),
    ("gated_per_head", _linear() + [uniform(-0.5, 0, 2, 3, 2, seed=4)],
     {"update_rule": "gated"}),
    ("delta_no_past", _linear(past=False) + [None, uniform(0.1, 0.9, 2, 3, 1, seed=5)],
     {"update_rule": "delta", "scale": 0.5}),
    ("gated_delta_gqa", _linear(q_heads=4) + [uniform(-0.5, 0, 2, 3, 6, seed=4),
                                              uniform(0.1, 0.9, 2, 3, 2, seed=5)], {}),
]


@pytest.mark.parametrize("case", LINEAR, ids=[c[0] for c in LINEAR])
def test_linear_attention_forward_and_gradient(case):
    _, inputs, attrs = case
    attrs = {"q_num_heads": inputs[0].shape[2] // 3, "kv_num_heads": 2, **attrs}
    check_forward("LinearAttention", f32(inputs), attrs, 2, reference=False)
    params = tuple(i for i, x in enumerate(inputs) if x is not None)
    finite_difference_check("LinearAttention", f32(inputs), attrs, 2, params)


# -- affine grids and unpooling ---------------------------------------------------------------
@pytest.mark.parametrize("size,align", [((2, 3, 4, 5), 0), ((1, 2, 3, 4, 2), 1)])
def test_affine_grid_forward_and_gradient(size, align):
    rank = len(size) - 2
    theta = normal(size[0], rank, rank + 1)
    attrs = {"align_corners": align}
    check_forward("AffineGrid", [theta.astype(np.float32), i64(size)], attrs, const=(1,),
                  reference=False)
    # The grid is linear in theta: float64 central differences are exact to rounding.
    finite_difference_check("AffineGrid", [theta, i64(size)], attrs, 1, params=(0,),
                            eps=1e-3, tol=dict(rel=1e-9, abs=1e-9))


@pytest.mark.parametrize("output_shape", [None, [2, 3, 5, 6]])
def test_max_unpool_forward_and_gradient(output_shape):
    x = normal(2, 3, 2, 2)
    # Flat indices into (2, 3, 4, 4) of one element per 2x2 window (stride 2), as
    # MaxPool's Indices output gives them.
    n, c, i, j = np.meshgrid(range(2), range(3), range(2), range(2), indexing="ij")
    rng = np.random.default_rng(3)
    di, dj = rng.integers(0, 2, n.shape), rng.integers(0, 2, n.shape)
    indices = ((n * 3 + c) * 4 + 2 * i + di) * 4 + 2 * j + dj
    inputs = [x, indices.astype(np.int64)] + ([] if output_shape is None
                                              else [i64(output_shape)])
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    check_forward("MaxUnpool", f32(inputs), attrs, const=(1, 2))
    check_gradients("MaxUnpool", inputs, attrs, const=(1, 2))


DEFORM = [  # (id, inputs X, W, offset, B, mask, attributes)
    ("plain", [normal(1, 2, 4, 4), normal(3, 2, 2, 2, seed=1),
               uniform(-1.3, 1.3, 1, 8, 3, 3, seed=2)], {}),
    ("groups_mask_bias_pads", [normal(2, 4, 4, 5), normal(4, 2, 2, 3, seed=1),
                               uniform(-1.3, 1.3, 2, 2 * 12, 2, 2, seed=2),
                               normal(4, seed=3), uniform(0, 1, 2, 12, 2, 2, seed=4)],
     {"group": 2, "offset_group": 2, "pads": [1, 0, 0, 1], "strides": [2, 2]}),
    ("dilations", [normal(1, 1, 5, 5), normal(1, 1, 2, 2, seed=1),
                   uniform(-0.7, 0.7, 1, 8, 3, 4, seed=2)], {"dilations": [2, 1]}),
]


@pytest.mark.parametrize("case", DEFORM, ids=[c[0] for c in DEFORM])
def test_deform_conv_forward_and_gradient(case):
    _, inputs, attrs = case
    check_forward("DeformConv", f32(inputs), attrs, reference=False)
    # Piecewise bilinear in the offsets (kinks at integer positions, which random
    # offsets miss by far more than eps): float64 central differences.
    finite_difference_check("DeformConv", inputs, attrs, 1, params=tuple(range(len(inputs))),
                            eps=1e-6, tol=dict(rel=1e-6, abs=1e-8))
