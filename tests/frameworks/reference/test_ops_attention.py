"""Reference transformer operators (Attention, RotaryEmbedding, Gelu) against onnx's
ReferenceEvaluator on one-node models, PyTorch autograd and finite differences."""
import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.op_checks import (check_backward, check_forward,
                                                  check_gradient, torch)

F = torch.nn.functional
DTYPES = [np.float32, np.float64]
# The same computation in the same precision as onnx's, summed in another order.
ORACLE_TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-11, atol=1e-12)}


def oracle(op_type, inputs, n_outputs=1, opset=None, **attributes):
    """The outputs of onnx.reference.ReferenceEvaluator on a one-node model (None marks an
    omitted optional input)."""
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    outputs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, **attributes)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if n],
        [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs])
    imports = [helper.make_opsetid("", opset)] if opset else None
    model = helper.make_model(graph, opset_imports=imports)
    return ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if n})


def random(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def assert_close(got, want, dtype, **tol):
    np.testing.assert_allclose(got, want, **{**ORACLE_TOL[np.dtype(dtype).type], **tol})


# -- Attention -------------------------------------------------------------------------
def qkv(dtype, batch=2, q_heads=4, kv_heads=2, q_len=3, kv_len=5, size=4, v_size=3,
        three_d=False, seed=0):
    Q = random((batch, q_heads, q_len, size), dtype, seed)
    K = random((batch, kv_heads, kv_len, size), dtype, seed + 1)
    V = random((batch, kv_heads, kv_len, v_size), dtype, seed + 2)
    if three_d:
        Q, K, V = (x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)
                   for x in (Q, K, V))
    return Q, K, V


def bool_mask(shape, seed=3):
    mask = np.random.default_rng(seed).uniform(size=shape) > 0.3
    mask[..., 0] = True  # every row keeps a key
    return mask


# (name, attributes, extra inputs builder(dtype) -> [attn_mask, past_key, past_value,
#  nonpad_kv_seqlen], number of outputs)
ATTENTION_CASES = [
    ("plain", {}, lambda d: [], 1),
    ("mha", {}, lambda d: [], 4),
    ("scale", {"scale": 0.25}, lambda d: [], 1),
    ("causal", {"is_causal": 1}, lambda d: [], 1),
    ("float_mask_2d", {}, lambda d: [random((3, 5), d, 7)], 1),
    ("float_mask_short", {}, lambda d: [random((3, 4), d, 7)], 1),
    ("bool_mask_4d", {}, lambda d: [bool_mask((2, 4, 3, 5))], 1),
    ("bool_mask_rank1_window", {"is_causal": 1, "left_window_size": 3},
     lambda d: [bool_mask((5,))], 1),
    ("head_mask_3d_causal", {"is_causal": 1}, lambda d: [random((4, 3, 5), d, 7)], 1),
    ("softcap_mode1", {"softcap": 1.5, "qk_matmul_output_mode": 1},
     lambda d: [random((3, 5), d, 7)], 4),
    ("mode2", {"qk_matmul_output_mode": 2, "is_causal": 1},
     lambda d: [random((2, 1, 3, 5), d, 7)], 4),
    ("mode3_precision", {"qk_matmul_output_mode": 3, "softmax_precision": 11},
     lambda d: [bool_mask((3, 5))], 4),
    ("past", {"is_causal": 1}, lambda d: [None, random((2, 2, 2, 4), d, 8),
                                          random((2, 2, 2, 3), d, 9)], 3),
    ("past_mask_qk", {"qk_matmul_output_mode": 2},
     lambda d: [random((3, 7), d, 7), random((2, 2, 2, 4), d, 8),
                random((2, 2, 2, 3), d, 9)], 4),
    ("nonpad_causal", {"is_causal": 1},
     lambda d: [None, None, None, np.array([5, 4], np.int64)], 1),
    ("nonpad_mask", {}, lambda d: [bool_mask((2, 1, 3, 4)), None, None,
                                   np.array([4, 3], np.int64)], 1),
    ("window", {"left_window_size": 1, "right_window_size": 2}, lambda d: [], 1),
    ("window_causal_past", {"left_window_size": 2, "is_causal": 1},
     lambda d: [None, random((2, 2, 2, 4), d, 8), random((2, 2, 2, 3), d, 9)], 3),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("three_d", [False, True], ids=["4d", "3d"])
@pytest.mark.parametrize("name,attributes,extra,n_outputs", ATTENTION_CASES,
                         ids=[c[0] for c in ATTENTION_CASES])
def test_attention_forward(name, attributes, extra, n_outputs, three_d, dtype):
    heads = {"q_num_heads": 4, "kv_num_heads": 2} if three_d else {}
    inputs = list(qkv(dtype, three_d=three_d)) + extra(dtype)
    op = create_operator("Attention", **attributes, **heads)
    outputs = op.forward(*inputs)
    assert len(outputs) == 4 and all(o.dtype == dtype for o in outputs)
    want = oracle("Attention", inputs, n_outputs, opset=25, **attributes, **heads)
    for got, expected in zip(outputs, want):
        assert got.shape == expected.shape
        assert_close(got, expected, dtype)


def torch_attention(q_heads, kv_heads, scale=None, mask=None, causal=False):
    """All four outputs of a 4-D Attention without cache, mode 0, in PyTorch."""
    def fn(Q, K, V, *rest):
        Y = F.scaled_dot_product_attention(
            Q, K, V, attn_mask=rest[0] if rest else None, is_causal=causal, scale=scale,
            enable_gqa=q_heads != kv_heads)
        reps = q_heads // kv_heads
        s = scale if scale is not None else Q.shape[-1] ** -0.5
        qk = Q @ K.repeat_interleave(reps, dim=1).transpose(-1, -2) * s
        return Y, K * 1, V * 1, qk
    return fn


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["plain", "gqa_causal", "float_mask", "bool_mask"])
def test_attention_backward_torch(case, dtype):
    kv_heads = 2 if case == "gqa_causal" else 4
    Q, K, V = qkv(dtype, kv_heads=kv_heads, kv_len=3 if case == "gqa_causal" else 5)
    inputs, attributes, mask = [Q, K, V], {"scale": 0.5}, None
    if case == "float_mask":
        mask = random((3, 5), dtype, 7)
        inputs.append(mask)
    elif case == "bool_mask":
        mask = bool_mask((2, 1, 3, 5))
        inputs.append(mask)
    elif case == "gqa_causal":
        attributes["is_causal"] = 1
    op = create_operator("Attention", **attributes)
    tol = {} if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    grads = check_backward(op, inputs,
                           torch_attention(4, kv_heads, 0.5, causal=case == "gqa_causal"),
                           **tol)
    if case == "bool_mask":
        assert grads[3] is None


FD_CASES = ([c + (False,) for c in ATTENTION_CASES]
            + [c + (True,) for c in ATTENTION_CASES
               if c[0] in ("mha", "softcap_mode1", "past_mask_qk", "nonpad_mask")])


@pytest.mark.parametrize("name,attributes,extra,n_outputs,three_d", FD_CASES,
                         ids=[c[0] + ("-3d" if c[-1] else "-4d") for c in FD_CASES])
def test_attention_finite_differences(name, attributes, extra, n_outputs, three_d):
    heads = {"q_num_heads": 4, "kv_num_heads": 2} if three_d else {}
    inputs = list(qkv(np.float64, batch=1, q_len=3, kv_len=5, three_d=three_d))
    inputs += extra(np.float64)
    if name == "nonpad_causal":
        inputs[-1] = inputs[-1][:1]
    if name == "nonpad_mask":
        inputs[-4], inputs[-1] = inputs[-4][:1], inputs[-1][:1]
    if name in ("past", "past_mask_qk", "window_causal_past"):
        inputs[4], inputs[5] = inputs[4][:1], inputs[5][:1]
    if name == "bool_mask_4d":
        inputs[3] = inputs[3][:1]
    if name == "mode2":
        inputs[3] = inputs[3][:1]
        # the causal mask's -inf would show in the scores output: inf - inf differences
        attributes = {"qk_matmul_output_mode": 2}
    op = create_operator("Attention", **attributes, **heads)
    # every output (present_key/value, qk_matmul_output) gets an upstream gradient
    check_gradient(op, inputs)


def test_attention_softcap_mode0_is_raw_scores():
    Q, K, V = qkv(np.float64, q_heads=2, kv_heads=2)
    _, _, _, qk = create_operator("Attention", softcap=0.5).forward(Q, K, V)
    np.testing.assert_allclose(qk, Q @ K.transpose(0, 1, 3, 2) / 2, rtol=1e-12)
    assert np.abs(qk).max() > 0.5  # not capped


def test_attention_fully_masked_rows_are_zero():
    Q, K, V = qkv(np.float64, q_heads=2, kv_heads=2)
    mask = np.ones((3, 5), bool)
    mask[1] = False
    for attributes in ({}, {"qk_matmul_output_mode": 3}):
        op = create_operator("Attention", **attributes)
        Y, _, _, qk = op.forward(Q, K, V, mask)
        assert np.all(np.isfinite(Y)) and np.all(Y[:, :, 1] == 0)
        if attributes:
            assert np.all(qk[:, :, 1] == 0)
        # (mode 0's raw scores do depend on the masked row's query: no upstream for them)
        d_qk = np.ones_like(qk) if attributes else None
        grads = op.backward([np.ones_like(Y), None, None, d_qk], [Q, K, V, mask],
                            [Y, None, None, qk])
        assert all(np.all(np.isfinite(g)) for g in grads[:3])
        assert np.all(grads[0][:, :, 1] == 0)
    # a causal block longer than the cache offset allows: leading rows see no key
    Y = create_operator("Attention", is_causal=1).forward(
        Q, K, V, None, None, None, np.array([1, 5], np.int64))[0]
    assert np.all(Y[0, :, :2] == 0) and np.all(Y[0, :, 2] != 0)


def test_attention_half_precision():
    Q, K, V = qkv(np.float16)
    Y = create_operator("Attention", is_causal=1).forward(Q, K, V)[0]
    (want,) = oracle("Attention", [Q, K, V], opset=23, is_causal=1)
    assert Y.dtype == np.float16
    np.testing.assert_allclose(Y.astype(np.float32), want.astype(np.float32), rtol=2e-3,
                               atol=2e-3)


def test_attention_errors():
    Q, K, V = qkv(np.float32)
    att = create_operator("Attention")
    with pytest.raises(ShapeError, match="must all be 3-D"):
        att.forward(Q, K[0], V)
    with pytest.raises(Deep500Error, match="need the attributes q_num_heads"):
        att.forward(*qkv(np.float32, three_d=True))
    with pytest.raises(ShapeError, match="multiple of K's"):
        att.forward(Q[:, :3], K, V)
    with pytest.raises(Deep500Error, match="given together"):
        att.forward(Q, K, V, None, K)
    with pytest.raises(ShapeError, match="attn_mask of shape"):
        att.forward(Q, K, V, np.zeros((4, 5), np.float32))
    with pytest.raises(Deep500Error, match="qk_matmul_output_mode=5"):
        create_operator("Attention", qk_matmul_output_mode=5).forward(Q, K, V)
    with pytest.raises(Deep500Error, match="cannot be combined"):
        att.forward(Q, K, V, None, K, V, np.array([5, 5], np.int64))
    with pytest.raises(Deep500Error, match="softmax_precision=7"):
        create_operator("Attention", softmax_precision=7).forward(Q, K, V)


# -- RotaryEmbedding -------------------------------------------------------------------
def rotary_inputs(dtype, three_d, positions, rotary_dim, seed=0):
    batch, heads, sequence, size = 2, 2, 3, 8
    half = (rotary_dim or size) // 2
    X = random((batch, heads, sequence, size), dtype, seed)
    if three_d:
        X = X.transpose(0, 2, 1, 3).reshape(batch, sequence, heads * size)
    rng = np.random.default_rng(seed + 1)
    if positions:
        angles = rng.uniform(0, 6, (10, half))
        ids = rng.integers(0, 10, (batch, sequence))
        return [X, np.cos(angles).astype(dtype), np.sin(angles).astype(dtype), ids]
    angles = rng.uniform(0, 6, (batch, sequence, half))
    return [X, np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", [True, False], ids=["ids", "no_ids"])
@pytest.mark.parametrize("three_d", [False, True], ids=["4d", "3d"])
def test_rotary(three_d, positions, interleaved, rotary_dim, dtype):
    inputs = rotary_inputs(dtype, three_d, positions, rotary_dim)
    attributes = {"interleaved": interleaved, "rotary_embedding_dim": rotary_dim}
    if three_d:
        attributes["num_heads"] = 2
    op = create_operator("RotaryEmbedding", **attributes)
    Y = op.forward(*inputs)
    assert Y.dtype == dtype and Y.shape == inputs[0].shape
    (want,) = oracle("RotaryEmbedding", inputs, **attributes)
    assert_close(Y, want, dtype)
    if dtype == np.float64:  # the caches' gradients scatter back through position_ids
        check_gradient(op, inputs)


def test_rotary_is_a_rotation():
    X, cos, sin, ids = rotary_inputs(np.float64, False, True, 0)
    op = create_operator("RotaryEmbedding")
    Y = op.forward(X, cos, sin, ids)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=-1), np.linalg.norm(X, axis=-1),
                               rtol=1e-12)
    # the backward of a rotation is the inverse rotation
    dX = op.backward([Y, None], [X, cos, sin, ids], [Y])[0]
    np.testing.assert_allclose(dX, X, rtol=1e-12, atol=1e-12)


def test_rotary_errors():
    X, cos, sin, ids = rotary_inputs(np.float32, False, True, 0)
    op = create_operator("RotaryEmbedding")
    with pytest.raises(ShapeError, match="position_ids must lie in"):
        op.forward(X, cos, sin, ids + 10)
    with pytest.raises(ShapeError, match="rotary_embedding_dim/2"):
        op.forward(X, cos[:, :3], sin[:, :3], ids)
    with pytest.raises(Deep500Error, match="needs the attribute num_heads"):
        op.forward(X.reshape(2, 3, 16), cos, sin, ids)
    with pytest.raises(ShapeError, match="must be even"):
        create_operator("RotaryEmbedding", rotary_embedding_dim=3).forward(X, cos, sin, ids)


# -- Gelu ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate, dtype):
    X = random((3, 4, 5), dtype) * 3
    op = create_operator("Gelu", approximate=approximate)
    Y = op.forward(X)
    assert Y.dtype == dtype
    if dtype == np.float32:  # onnx's Erf is not accurate to float64
        (want,) = oracle("Gelu", [X], opset=20, approximate=approximate)
        assert_close(Y, want, dtype)
    check_forward(op, [X], lambda x: F.gelu(x, approximate=approximate))
    check_backward(op, [X], lambda x: F.gelu(x, approximate=approximate))
    if dtype == np.float64:
        check_gradient(op, [X])


def test_gelu_errors():
    with pytest.raises(Deep500Error, match="approximate='fast'"):
        create_operator("Gelu", approximate="fast").forward(np.zeros(2, np.float32))


def test_vectorized_erf_matches_math_erf():
    import math

    from deep500.frameworks.reference.operators._op_common_erf import erf
    x = np.concatenate([np.linspace(-7, 7, 20001), np.geomspace(1e-300, 0.2, 500),
                        -np.geomspace(1e-300, 0.2, 500), [6.0, 0.0625, 0.0]])
    want = np.array([math.erf(v) for v in x])
    got = erf(x)
    # within 4 units in the last place of the C library's erf, tiny arguments included
    assert np.all(np.abs(got - want) <= 4 * np.spacing(np.abs(want)))
    special = erf(np.array([np.inf, -np.inf, np.nan, -0.0]))
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2])
    assert special[3] == 0 and np.signbit(special[3])


def test_transformer_block_backprop_through_the_executor():
    """LayerNormalization -> causal 3-D GQA Attention -> Gelu -> RMSNormalization in one
    graph: the executor's parameter gradients match finite differences of its loss."""
    import deep500.frameworks.reference as d5ref
    from onnx import TensorProto, numpy_helper

    rng = np.random.default_rng(0)
    weights = {"Wq": rng.standard_normal((6, 8)) * 0.5, "Wk": rng.standard_normal((6, 4)) * 0.5,
               "Wv": rng.standard_normal((6, 4)) * 0.5, "gamma": rng.uniform(0.5, 1.5, 6),
               "beta": rng.standard_normal(6) * 0.1, "scale": rng.uniform(0.5, 1.5, 8),
               "axes": np.array([0, 1, 2], np.int64)}
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"],
                         stash_type=11),
        helper.make_node("MatMul", ["h", "Wq"], ["q"]),
        helper.make_node("MatMul", ["h", "Wk"], ["k"]),
        helper.make_node("MatMul", ["h", "Wv"], ["v"]),
        helper.make_node("Attention", ["q", "k", "v"], ["a"], is_causal=1, q_num_heads=4,
                         kv_num_heads=2),
        helper.make_node("Gelu", ["a"], ["g"]),
        helper.make_node("RMSNormalization", ["g", "scale"], ["r"], stash_type=11),
        helper.make_node("Mul", ["r", "r"], ["r2"]),
        helper.make_node("ReduceSum", ["r2", "axes"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 5, 6])],
        [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    executor = d5ref.from_onnx(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 23)]))
    x = rng.standard_normal((2, 5, 6))
    result = executor.inference_and_backprop({"x": x}, "loss")
    for name in ("Wq", "Wk", "Wv", "gamma", "beta", "scale"):
        gradient = result[f"{name}.grad"]
        value = weights[name]

        def loss(w):
            executor.network.feed_tensor(name, w, is_param=True)
            return float(executor.inference({"x": x})["loss"])

        for direction in rng.standard_normal((2,) + value.shape):
            numeric = (loss(value + 1e-6 * direction) - loss(value - 1e-6 * direction)) / 2e-6
            np.testing.assert_allclose(np.sum(gradient * direction), numeric, rtol=1e-6,
                                       atol=1e-8, err_msg=name)
        executor.network.feed_tensor(name, value, is_param=True)
