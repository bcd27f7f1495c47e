"""The PyTorch executor's attention, normalization, recurrent and resampling operators
(``deep500/frameworks/pytorch/ops/{attention,normalization,recurrent,resample}.py``, with
the detection, pooling and conv operators tested alongside them) on one-node models: forward against
onnx's ReferenceEvaluator (float32, float64 and float16 where the spec allows them),
gradients of a weighted sum of the output against the reference executor's backward
(float64, every floating-point input a parameter)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import deep500.frameworks.pytorch as d5pt  # noqa: E402
import deep500.frameworks.reference as d5ref  # noqa: E402
from deep500.lv1_network import gradient_name  # noqa: E402
from deep500.utils.errors import Deep500Error  # noqa: E402

# Forward: the same formula as onnx's reference evaluated in another order; float16 has
# a unit roundoff of 4.9e-4, and softmax/normalization steps lose a few of them.
FORWARD_TOL = {np.float32: dict(rtol=1e-4, atol=1e-5),
               np.float64: dict(rtol=1e-9, atol=1e-10),
               np.float16: dict(rtol=1e-2, atol=4e-3)}
# Gradients in float64 of two independent implementations (autograd vs hand-written
# backward); recurrences of a few steps amplify the roundoff by at most ~1e2.
GRAD_TOL = dict(rtol=1e-7, atol=1e-9)
GRAD_TOL32 = dict(rtol=2e-4, atol=2e-5)   # float32-only operators (RotaryEmbedding)


@pytest.fixture(autouse=True, scope="module")
def single_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def rand(rng, *shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def one_node(op_type, inputs: dict, attributes: dict, outputs: int, opset: int,
             params=(), extra_nodes=(), extra_inits=None, graph_outputs=None):
    """A model of one ``op_type`` node; ``inputs`` name -> array (None: omitted); names in
    ``params`` and every non-float input become initializers, the rest graph inputs
    (``extra_inits``: more initializers, for ``extra_nodes``)."""
    names = [n if v is not None else "" for n, v in inputs.items()]
    while names and not names[-1]:
        names.pop()
    out_names = [f"y{i}" for i in range(outputs)]
    nodes = [helper.make_node(op_type, names, out_names, **attributes)] + list(extra_nodes)
    graph_inputs, inits = [], []
    for n, v in list(inputs.items()) + list((extra_inits or {}).items()):
        if v is None:
            continue
        if n in params or n in (extra_inits or {}) or not np.issubdtype(v.dtype,
                                                                         np.floating):
            inits.append(numpy_helper.from_array(v, n))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
    imports = [helper.make_opsetid("", opset)]
    wanted = graph_outputs or out_names
    untyped = helper.make_model(helper.make_graph(
        nodes, "probe", graph_inputs,
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in wanted],
        inits), opset_imports=imports, ir_version=10)
    feeds = {n: v for n, v in inputs.items() if v is not None and n not in params
             and np.issubdtype(v.dtype, np.floating)}
    probe = helper.make_model(helper.make_graph(nodes, "probe", graph_inputs, [], inits),
                              opset_imports=imports, ir_version=10)
    known = {v.name: v.type.tensor_type
             for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    try:   # types and ranks from onnx's reference where shape inference has none
        results = ReferenceEvaluator(untyped).run(None, feeds)
    except Exception:
        results = None
    types = []
    first = next(v for v in inputs.values() if v is not None)
    for i, n in enumerate(wanted):
        info = known.get(n)
        if info is not None and info.elem_type:
            elem = info.elem_type
        elif results is not None:
            elem = helper.np_dtype_to_tensor_dtype(results[i].dtype)
        else:
            elem = helper.np_dtype_to_tensor_dtype(first.dtype)
        if results is not None:
            rank = results[i].ndim
        else:
            rank = len(info.shape.dim) if info is not None else first.ndim
        types.append((elem, rank))
    declared = [helper.make_tensor_value_info(n, t, [f"{n}_{i}" for i in range(rank)])
                for n, (t, rank) in zip(wanted, types)]
    graph = helper.make_graph(nodes, op_type.lower(), graph_inputs, declared, inits)
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


def check_forward(op_type, inputs, attributes=None, outputs=1, opset=23, oracle=None,
                  tolerance=None):
    """Outputs against onnx's ReferenceEvaluator (float32, float16) or the reference
    executor (float64: onnx's evaluates some operators, GridSample, Resize, LRN, in
    float32 internally, 1e-7 apart from float64)."""
    attributes = attributes or {}
    model = one_node(op_type, inputs, attributes, outputs, opset)
    feeds = {n: v for n, v in inputs.items()
             if v is not None and np.issubdtype(v.dtype, np.floating)}
    if oracle is None:
        oracle = "d5ref" if next(iter(feeds.values())).dtype == np.float64 else "onnx"
    if oracle == "onnx":
        want = ReferenceEvaluator(model).run(None, feeds)
    else:   # where onnx's reference cannot run the case (see the callers)
        result = d5ref.from_onnx(model).inference(feeds)
        want = [result[f"y{i}"] for i in range(outputs)]
    got = d5pt.from_onnx(model).inference(feeds)
    dtype = next(iter(feeds.values())).dtype.type
    for i, expected in enumerate(want):
        actual = got[f"y{i}"]
        assert actual.shape == expected.shape, (i, actual.shape, expected.shape)
        declared = model.graph.output[i].type.tensor_type.elem_type
        assert actual.dtype == helper.tensor_dtype_to_np_dtype(declared), (i, actual.dtype)
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   err_msg=f"output {i}",
                                   **(tolerance or FORWARD_TOL[dtype]))


def check_gradients(op_type, inputs, attributes=None, opset=23, output=0, outputs=1,
                    tolerance=None):
    """d loss / d (every float input) with loss = Σ y_output · R, PyTorch vs reference."""
    attributes = attributes or {}
    dtype = next(v.dtype for v in inputs.values()
                 if v is not None and np.issubdtype(v.dtype, np.floating))
    if tolerance is None:
        tolerance = GRAD_TOL if dtype == np.float64 else GRAD_TOL32
    rng = np.random.default_rng(7)
    params = {n for n, v in inputs.items()
              if v is not None and np.issubdtype(v.dtype, np.floating)}
    probe = one_node(op_type, inputs, attributes, outputs, opset)
    feeds = {n: v for n, v in inputs.items() if n in params}
    shape = d5ref.from_onnx(probe).inference(feeds)[f"y{output}"].shape
    weights = rng.standard_normal(shape)
    loss_nodes = [helper.make_node("Mul", [f"y{output}", "loss_R"], ["weighted"]),
                  helper.make_node("ReduceSum", ["weighted"], ["loss"], keepdims=0)]
    model = one_node(op_type, inputs, attributes, outputs, opset, params=params,
                     extra_nodes=loss_nodes, extra_inits={"loss_R": weights.astype(dtype)},
                     graph_outputs=["loss"])
    got = d5pt.from_onnx(model).inference_and_backprop({}, "loss")
    want = d5ref.from_onnx(model).inference_and_backprop({}, "loss")
    np.testing.assert_allclose(got["loss"], want["loss"], **tolerance)
    for name in sorted(params - {"roi", "scales"}):   # Resize's and Upsample's constants
        np.testing.assert_allclose(got[gradient_name(name)], want[gradient_name(name)],
                                   err_msg=name, **tolerance)


# -- attention -------------------------------------------------------------------------
def attention_inputs(rng, dtype, three_d=False, q_heads=4, kv_heads=2, q_len=3, kv_len=5,
                     mask=None, past=0, size=4):
    Q = rand(rng, 2, q_heads, q_len, size, dtype=dtype)
    K = rand(rng, 2, kv_heads, kv_len, size, dtype=dtype)
    V = rand(rng, 2, kv_heads, kv_len, 3, dtype=dtype)
    if three_d:
        Q, K, V = (x.transpose(0, 2, 1, 3).reshape(2, x.shape[2], -1) for x in (Q, K, V))
    inputs = {"Q": Q, "K": K, "V": V, "mask": mask}
    if past:
        inputs["past_key"] = rand(rng, 2, kv_heads, past, size, dtype=dtype)
        inputs["past_value"] = rand(rng, 2, kv_heads, past, 3, dtype=dtype)
    return inputs


def bool_mask(rng, shape):
    mask = rng.uniform(size=shape) > 0.4
    mask[..., 0] = True
    return mask


ATTENTION_CASES = {
    "plain_4d": (lambda r, d: attention_inputs(r, d), {}, 1, 23),
    "gqa_3d_causal": (lambda r, d: attention_inputs(r, d, three_d=True),
                      {"is_causal": 1, "q_num_heads": 4, "kv_num_heads": 2}, 1, 23),
    "bool_mask_past_mode3": (lambda r, d: attention_inputs(
        r, d, mask=bool_mask(r, (2, 1, 3, 7)), past=2),
        {"qk_matmul_output_mode": 3, "scale": 0.3}, 4, 23),
    "short_float_mask_softcap_mode2": (lambda r, d: attention_inputs(
        r, d, mask=rand(r, 3, 4, dtype=d)), {"softcap": 2.0, "qk_matmul_output_mode": 2},
        4, 23),
    "causal_past_head_mask": (lambda r, d: attention_inputs(
        r, d, mask=rand(r, 4, 3, 6, dtype=d), past=1), {"is_causal": 1}, 3, 23),
    "fully_masked_row": (lambda r, d: attention_inputs(
        r, d, mask=np.array([[True] * 5, [False] * 5, [True, False] * 2 + [True]])),
        {"qk_matmul_output_mode": 1}, 4, 23),
    "nonpad_causal": (lambda r, d: {**attention_inputs(r, d, q_len=2, kv_len=5),
                                    "past_key": None, "past_value": None,
                                    "nonpad": np.array([4, 5], np.int64)},
                      {"is_causal": 1}, 1, 24),
    "window_gqa": (lambda r, d: attention_inputs(r, d, q_len=5, mask=bool_mask(r, (5,))),
                   {"left_window_size": 2, "right_window_size": 1}, 1, 25),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("case", sorted(ATTENTION_CASES))
def test_attention_forward(case, dtype):
    build, attributes, outputs, opset = ATTENTION_CASES[case]
    inputs = build(np.random.default_rng(len(case)), dtype)
    check_forward("Attention", inputs, attributes, outputs, opset)


@pytest.mark.parametrize("case", ["plain_4d", "gqa_3d_causal", "bool_mask_past_mode3",
                                  "short_float_mask_softcap_mode2",
                                  "causal_past_head_mask"])
def test_attention_gradients(case):
    build, attributes, outputs, opset = ATTENTION_CASES[case]
    inputs = build(np.random.default_rng(len(case)), np.float64)
    check_gradients("Attention", inputs, attributes, opset, outputs=outputs)


def test_attention_3d_without_heads_is_refused():
    inputs = attention_inputs(np.random.default_rng(0), np.float32, three_d=True)
    model = one_node("Attention", inputs, {}, 1, 23)
    with pytest.raises(Deep500Error, match="q_num_heads"):
        d5pt.from_onnx(model).inference({n: v for n, v in inputs.items() if v is not None})


def linear_attention_inputs(rng, dtype, rule, q_heads=2, kv_heads=1, steps=3, d_k=3,
                            d_v=2, past=False, per_key_decay=False, scalar_beta=False):
    key = rand(rng, 2, steps, kv_heads, d_k)
    key = key / np.linalg.norm(key, axis=-1, keepdims=True)   # L2-normalised, as the
    inputs = {"q": rand(rng, 2, steps, q_heads * d_k, dtype=dtype),   # delta rules expect
              "k": key.reshape(2, steps, -1).astype(dtype),
              "v": rand(rng, 2, steps, kv_heads * d_v, dtype=dtype),
              "past": rand(rng, 2, kv_heads, d_k, d_v, dtype=dtype) if past else None,
              "decay": None, "beta": None}
    if "gated" in rule:
        width = kv_heads * d_k if per_key_decay else kv_heads
        inputs["decay"] = -np.abs(rand(rng, 2, steps, width, dtype=dtype)) * 0.5
    if "delta" in rule:
        width = 1 if scalar_beta else kv_heads
        inputs["beta"] = (1 / (1 + np.exp(-rand(rng, 2, steps, width)))).astype(dtype)
    return inputs


LINEAR_ATTENTION_CASES = {
    "linear": ("linear", dict(q_heads=2, kv_heads=2), {}),
    "gated_per_head_past": ("gated", dict(past=True), {"scale": 0.7}),
    "delta_scalar_beta": ("delta", dict(scalar_beta=True), {}),
    "gated_delta_gqa_per_key": ("gated_delta", dict(q_heads=4, kv_heads=2, past=True,
                                                    per_key_decay=True), {}),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])   # float64: not in its types
@pytest.mark.parametrize("case", sorted(LINEAR_ATTENTION_CASES))
def test_linear_attention(case, dtype):
    rule, shape, extra = LINEAR_ATTENTION_CASES[case]
    rng = np.random.default_rng(len(case))
    inputs = linear_attention_inputs(rng, dtype, rule, **shape)
    attributes = {"update_rule": rule, "q_num_heads": shape.get("q_heads", 2),
                  "kv_num_heads": shape.get("kv_heads", 1), **extra}
    check_forward("LinearAttention", inputs, attributes, 2, opset=27, oracle="onnx")
    if dtype == np.float32:
        # float32 central differences: eps 1e-2 keeps roundoff (1e-7/eps) and truncation
        # (eps² · third derivative, O(1) here) near 1e-4.
        check_gradients_numerically("LinearAttention", inputs, attributes, 27, outputs=2,
                                    eps=1e-2, tolerance=dict(rtol=1e-2, atol=2e-3))


def _modifier(name, nodes, elem):
    """A one-input, one-output FlexAttention modifier subgraph."""
    shape = ["B", "H", "L", "S"]
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info("s", elem, shape)],
                             [helper.make_tensor_value_info("out", elem, shape)])


def flex_modifiers(elem, causal=True, prob=True):
    """score_mod: a causal mask (key index > query index → -inf) from Range and Where;
    prob_mod: probabilities scaled by 0.5."""
    attributes = {}
    if causal:
        nodes = [helper.make_node("Shape", ["s"], ["shape"]),
                 helper.make_node("Constant", [], ["two"], value_int=2),
                 helper.make_node("Constant", [], ["three"], value_int=3),
                 helper.make_node("Gather", ["shape", "two"], ["L"]),
                 helper.make_node("Gather", ["shape", "three"], ["S"]),
                 helper.make_node("Constant", [], ["zero"], value_int=0),
                 helper.make_node("Constant", [], ["one"], value_int=1),
                 helper.make_node("Range", ["zero", "L", "one"], ["rows"]),
                 helper.make_node("Range", ["zero", "S", "one"], ["cols"]),
                 helper.make_node("Unsqueeze", ["rows", "one"], ["rows2"]),
                 helper.make_node("GreaterOrEqual", ["rows2", "cols"], ["keep"]),
                 helper.make_node("Constant", [], ["minf"], value=numpy_helper.from_array(
                     np.array(-np.inf, helper.tensor_dtype_to_np_dtype(elem)))),
                 helper.make_node("Where", ["keep", "s", "minf"], ["out"])]
        attributes["score_mod"] = _modifier("score_mod", nodes, elem)
    if prob:
        half = numpy_helper.from_array(np.array(0.5, helper.tensor_dtype_to_np_dtype(elem)))
        attributes["prob_mod"] = _modifier("prob_mod", [
            helper.make_node("Constant", [], ["half"], value=half),
            helper.make_node("Mul", ["s", "half"], ["out"])], elem)
    return attributes


def flex_model(inputs, attributes, params=()):
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["y0"],
                            domain="ai.onnx.preview", **attributes)
    graph_inputs, inits = [], []
    for n, v in inputs.items():
        if n in params:
            inits.append(numpy_helper.from_array(v, n))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
    elem = helper.np_dtype_to_tensor_dtype(inputs["Q"].dtype)
    q, v = inputs["Q"].shape, inputs["V"].shape
    out = helper.make_tensor_value_info("y0", elem, [q[0], q[1], q[2], v[3]])
    graph = helper.make_graph([node], "flex", graph_inputs, [out], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mods", [(True, True), (True, False), (False, False)],
                         ids=["score_and_prob_mod", "score_mod", "plain"])
def test_flexattention(mods, dtype):
    """Against onnx's reference; gradients (the reference executor has no FlexAttention)
    against central differences, through the subgraph modules too."""
    rng = np.random.default_rng(4)
    inputs = {"Q": rand(rng, 1, 4, 3, 2, dtype=dtype),
              "K": rand(rng, 1, 2, 3, 2, dtype=dtype),
              "V": rand(rng, 1, 2, 3, 3, dtype=dtype)}
    attributes = flex_modifiers(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), *mods)
    model = flex_model(inputs, attributes)
    want = ReferenceEvaluator(model).run(None, inputs)[0]
    got = d5pt.from_onnx(model).inference(inputs)["y0"]
    np.testing.assert_allclose(got, want, **FORWARD_TOL[np.float32])
    if dtype != np.float64:
        return
    executor = d5pt.from_onnx(flex_model(inputs, attributes, params=inputs))
    weights = rng.standard_normal(want.shape)
    loss = lambda: float((executor.inference({})["y0"] * weights).sum())  # noqa: E731
    module = executor.network.module
    outputs = module()["y0"]
    grads = torch.autograd.grad((outputs * torch.from_numpy(weights)).sum(),
                                [module.onnx_parameters[n] for n in inputs])
    network = executor.network
    for name, grad in zip(inputs, grads):
        value = network.fetch_tensor(name)
        numeric = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            for sign in (1, -1):
                shifted = value.copy()
                shifted[index] += sign * 1e-6
                network.feed_tensor(name, shifted)
                numeric[index] += sign * loss()
            numeric[index] /= 2e-6
        network.feed_tensor(name, value)
        np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-6, atol=1e-8,
                                   err_msg=name)


# -- normalization and transformer blocks ----------------------------------------------
def norm_cases(dtype):
    rng = np.random.default_rng(3)
    x = rand(rng, 2, 4, 3, 5, dtype=dtype)
    return {
        "layernorm_last": ("LayerNormalization", {"X": x, "S": rand(rng, 5, dtype=dtype),
                                                  "B": rand(rng, 5, dtype=dtype)},
                           {}, 1, 17),
        "layernorm_axis1_stats": ("LayerNormalization",
                                  {"X": x, "S": rand(rng, 4, 3, 5, dtype=dtype)},
                                  {"axis": 1, "epsilon": 1e-3}, 3, 17),
        "layernorm_broadcast_scale": ("LayerNormalization",
                                      {"X": x, "S": rand(rng, 1, 5, dtype=dtype),
                                       "B": rand(rng, 3, 1, dtype=dtype)},
                                      {"axis": -2}, 1, 17),
        "rms_last": ("RMSNormalization", {"X": x, "S": rand(rng, 5, dtype=dtype)}, {},
                     1, 23),
        "rms_axis1": ("RMSNormalization", {"X": x, "S": rand(rng, 4, 3, 5, dtype=dtype)},
                      {"axis": 1, "epsilon": 1e-2}, 1, 23),
        "groupnorm_21": ("GroupNormalization", {"X": x, "S": rand(rng, 4, dtype=dtype),
                                                "B": rand(rng, 4, dtype=dtype)},
                         {"num_groups": 2}, 1, 21),
        "instancenorm": ("InstanceNormalization", {"X": x, "S": rand(rng, 4, dtype=dtype),
                                                   "B": rand(rng, 4, dtype=dtype)},
                         {"epsilon": 1e-3}, 1, 22),
        "mvn_default": ("MeanVarianceNormalization", {"X": x}, {}, 1, 13),
        "mvn_axes": ("MeanVarianceNormalization", {"X": x}, {"axes": [1, 3]}, 1, 13),
        "lpnorm_p1": ("LpNormalization", {"X": x}, {"p": 1, "axis": 1}, 1, 22),
        "lpnorm_p2": ("LpNormalization", {"X": x}, {}, 1, 22),
        "lrn_odd": ("LRN", {"X": x}, {"size": 3, "alpha": 0.1, "beta": 0.6, "bias": 1.5},
                    1, 13),
        "lrn_even": ("LRN", {"X": x}, {"size": 2}, 1, 13),
        "gelu": ("Gelu", {"X": x}, {}, 1, 20),
        "gelu_tanh": ("Gelu", {"X": x}, {"approximate": "tanh"}, 1, 20),
        "rotary_4d_positions": ("RotaryEmbedding", {
            "X": x[:, :, :, :4], "cos": np.cos(rand(rng, 6, 2, dtype=dtype)),
            "sin": np.sin(rand(rng, 6, 2, dtype=dtype)),
            "pos": np.array([[0, 2, 5], [1, 1, 3]], np.int64)}, {}, 1, 23),
        "rotary_3d_interleaved_partial": ("RotaryEmbedding", {
            "X": x.reshape(2, 4, 15)[:, :, :12],
            "cos": np.cos(rand(rng, 2, 4, 1, dtype=dtype)),
            "sin": np.sin(rand(rng, 2, 4, 1, dtype=dtype))},
            {"num_heads": 3, "interleaved": 1, "rotary_embedding_dim": 2}, 1, 23),
    }


NORM_CASES = sorted(norm_cases(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("case", NORM_CASES)
def test_normalization_forward(case, dtype):
    op_type, inputs, attributes, outputs, opset = norm_cases(dtype)[case]
    if dtype == np.float64 and op_type == "RotaryEmbedding":
        pytest.skip("RotaryEmbedding defines float, float16 and bfloat16 only")
    if dtype == np.float16 and op_type in ("GroupNormalization", "LRN",
                                           "MeanVarianceNormalization"):
        pytest.skip("onnx's reference evaluates these in float16 itself")
    oracle = None
    if op_type == "LRN" or (op_type == "LpNormalization" and attributes.get("p") == 1):
        # onnx's reference LRN loops over the batch axis instead of the channels, and
        # its LpNormalization sums x, not |x|, for p=1: the reference executor decides.
        if dtype == np.float16:
            pytest.skip("the reference executor's float16 LRN/LpNormalization")
        oracle = "d5ref"
    if dtype == np.float64 and op_type == "MeanVarianceNormalization":
        pytest.skip("the function body of MeanVarianceNormalization adds a float32 "
                    "epsilon: ONNX shape inference refuses float64 inputs")
    stashed = op_type in ("LayerNormalization", "RMSNormalization", "GroupNormalization")
    tolerance = FORWARD_TOL[np.float32] if stashed and dtype == np.float64 else None
    check_forward(op_type, inputs, attributes, outputs, opset, oracle, tolerance)


@pytest.mark.parametrize("case", NORM_CASES)
def test_normalization_gradients(case):
    op_type, inputs, attributes, outputs, opset = norm_cases(np.float64)[case]
    if op_type == "RotaryEmbedding":   # float64 is not in its type constraint
        inputs = {n: v.astype(np.float32) if v.dtype == np.float64 else v
                  for n, v in inputs.items()}
    if op_type == "MeanVarianceNormalization":   # the same, in practice (see above)
        inputs = {"X": inputs["X"].astype(np.float32)}
    # The statistics of Layer/RMS/GroupNormalization are computed in stash_type (float32)
    # whatever X's type, so float64 gradients agree to float32 precision only.
    stashed = op_type in ("LayerNormalization", "RMSNormalization", "GroupNormalization")
    check_gradients(op_type, inputs, attributes, opset, outputs=outputs,
                    tolerance=GRAD_TOL32 if stashed else None)


# -- recurrent -------------------------------------------------------------------------
def recurrent_inputs(op_type, rng, dtype, directions=1, batch=3, steps=4, size=3, hidden=2,
                     lengths=None, initial=False, peepholes=False, layout=0):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]
    X = rand(rng, steps, batch, size, dtype=dtype) * 0.8
    if layout:
        X = X.transpose(1, 0, 2).copy()
    inputs = {"X": X, "W": rand(rng, directions, gates * hidden, size, dtype=dtype) * 0.6,
              "R": rand(rng, directions, gates * hidden, hidden, dtype=dtype) * 0.6,
              "B": rand(rng, directions, 2 * gates * hidden, dtype=dtype) * 0.3,
              "lens": None if lengths is None else np.array(lengths, np.int32)}
    if initial:
        shape = (batch, directions, hidden) if layout else (directions, batch, hidden)
        inputs["h0"] = rand(rng, *shape, dtype=dtype)
        if op_type == "LSTM":
            inputs["c0"] = rand(rng, *shape, dtype=dtype)
    if peepholes:
        inputs.setdefault("h0", None)
        inputs.setdefault("c0", None)
        inputs["P"] = rand(rng, directions, 3 * hidden, dtype=dtype) * 0.5
    return inputs


RECURRENT_CASES = {
    "lstm_bidirectional_lens_peepholes": ("LSTM", dict(directions=2, lengths=[4, 2, 3],
                                                       initial=True, peepholes=True),
                                          {"direction": "bidirectional", "hidden_size": 2},
                                          3),
    "lstm_layout1_clip": ("LSTM", dict(layout=1, initial=True),
                          {"hidden_size": 2, "layout": 1, "clip": 0.7}, 3),
    "lstm_reverse_activations": ("LSTM", dict(lengths=[1, 4, 2]),
                                 {"hidden_size": 2, "direction": "reverse",
                                  "activations": ["HardSigmoid", "Tanh", "Softsign"],
                                  "activation_alpha": [0.3], "activation_beta": [0.4]}, 2),
    "gru_default": ("GRU", dict(initial=True), {"hidden_size": 2}, 2),
    "gru_linear_before_reset_reverse_lens": ("GRU", dict(lengths=[3, 4, 1]),
                                             {"hidden_size": 2, "direction": "reverse",
                                              "linear_before_reset": 1}, 2),
    "gru_bidirectional_layout1": ("GRU", dict(directions=2, layout=1, initial=True),
                                  {"hidden_size": 2, "direction": "bidirectional",
                                   "layout": 1}, 2),
    "rnn_default": ("RNN", dict(), {"hidden_size": 2}, 2),
    "rnn_bidirectional_lens_relu": ("RNN", dict(directions=2, lengths=[2, 4, 3],
                                                initial=True),
                                    {"hidden_size": 2, "direction": "bidirectional",
                                     "activations": ["Relu", "Tanh"], "clip": 1.5}, 2),
    "rnn_reverse_leakyrelu": ("RNN", dict(lengths=[2, 4, 3]),
                              {"hidden_size": 2, "direction": "reverse",
                               "activations": ["LeakyRelu"], "activation_alpha": [0.2]}, 2),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(RECURRENT_CASES))
def test_recurrent_forward(case, dtype):
    op_type, shape, attributes, outputs = RECURRENT_CASES[case]
    inputs = recurrent_inputs(op_type, np.random.default_rng(len(case)), dtype, **shape)
    # onnx's reference RNN knows Tanh and Sigmoid only, and its LSTM and GRU differ from
    # the spec (and onnxruntime) with clip, sequence_lens and layout: the reference
    # executor is the oracle, and onnx's as well for the default attributes.
    check_forward(op_type, inputs, attributes, outputs, opset=22, oracle="d5ref")
    if case.endswith("_default"):
        check_forward(op_type, inputs, attributes, outputs, opset=22, oracle="onnx")


@pytest.mark.parametrize("case", sorted(RECURRENT_CASES))
def test_recurrent_gradients(case):
    op_type, shape, attributes, outputs = RECURRENT_CASES[case]
    inputs = recurrent_inputs(op_type, np.random.default_rng(len(case)), np.float64,
                              **shape)
    for output in range(outputs):   # through Y, and through the final states
        check_gradients(op_type, inputs, attributes, opset=22, output=output,
                        outputs=outputs)


# -- resampling and windows ------------------------------------------------------------
def resample_cases(dtype):
    rng = np.random.default_rng(5)
    x = rand(rng, 1, 2, 4, 5, dtype=dtype)
    f32 = np.float32
    return {
        "resize_linear_scales": ("Resize", {"X": x, "roi": None,
                                            "scales": np.array([1, 1, 1.5, 0.6], f32)},
                                 {"mode": "linear"}, 18),
        "resize_cubic_sizes_exclude_antialias": (
            "Resize", {"X": x, "roi": None, "scales": None,
                       "sizes": np.array([3, 7], np.int64)},
            {"mode": "cubic", "axes": [2, 3], "exclude_outside": 1, "antialias": 1,
             "cubic_coeff_a": -0.5}, 18),
        "resize_nearest_asymmetric_ceil": (
            "Resize", {"X": x, "roi": None, "scales": np.array([2.0, 0.5], f32)},
            {"mode": "nearest", "axes": [3, 2], "coordinate_transformation_mode":
             "asymmetric", "nearest_mode": "ceil"}, 19),
        "resize_tf_crop_and_resize": (
            "Resize", {"X": x, "roi": np.array([0.4, -0.2, 0.9, 1.3], f32), "scales": None,
                       "sizes": np.array([3, 4], np.int64)},
            {"mode": "linear", "axes": [2, 3], "coordinate_transformation_mode":
             "tf_crop_and_resize", "extrapolation_value": 2.5}, 19),
        "resize_not_larger_align_corners": (
            "Resize", {"X": x, "roi": None, "scales": None,
                       "sizes": np.array([6, 6], np.int64)},
            {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger",
             "coordinate_transformation_mode": "align_corners"}, 19),
        "gridsample_linear_zeros": ("GridSample", {"X": x, "grid": rand(rng, 1, 3, 2, 2,
                                                                       dtype=dtype)},
                                    {}, 22),
        "gridsample_cubic_reflection_align": ("GridSample", {
            "X": x, "grid": rand(rng, 1, 3, 2, 2, dtype=dtype)},
            {"mode": "cubic", "padding_mode": "reflection", "align_corners": 1}, 22),
        "gridsample_nearest_border": ("GridSample", {
            "X": x, "grid": (rand(rng, 1, 3, 2, 2, dtype=dtype) * 0.9).round(1) + 0.01},
            {"mode": "nearest", "padding_mode": "border"}, 22),
        "lppool_p3_pads_strides": ("LpPool", {"X": x}, {"kernel_shape": [2, 3], "p": 3,
                                                        "pads": [1, 0, 0, 1],
                                                        "strides": [2, 1]}, 22),
        "lppool_p2_ceil_dilations": ("LpPool", {"X": x}, {"kernel_shape": [2, 2],
                                                          "ceil_mode": 1, "strides": [2, 2],
                                                          "dilations": [1, 2]}, 22),
        "lppool_same_upper": ("LpPool", {"X": x}, {"kernel_shape": [3, 2],
                                                   "auto_pad": "SAME_UPPER"}, 22),
        "col2im_pads_strides_dilations": ("Col2Im", {
            "X": rand(rng, 2, 3 * 4, 6, dtype=dtype), "image": np.array([4, 5], np.int64),
            "block": np.array([2, 2], np.int64)},
            {"strides": [2, 1], "pads": [1, 0, 0, 0], "dilations": [1, 2]}, 18),
        "col2im_3d": ("Col2Im", {"X": rand(rng, 1, 2 * 8, 8, dtype=dtype),
                                 "image": np.array([3, 3, 3], np.int64),
                                 "block": np.array([2, 2, 2], np.int64)}, {}, 18),
        "centercroppad_crop_and_pad": ("CenterCropPad", {
            "X": x, "shape": np.array([3, 8], np.int64)}, {"axes": [-2, 3]}, 18),
        "centercroppad_all_axes": ("CenterCropPad", {
            "X": x, "shape": np.array([1, 3, 1, 6], np.int64)}, {}, 18),
    }


RESAMPLE_CASES = sorted(resample_cases(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", RESAMPLE_CASES)
def test_resampling_forward(case, dtype):
    op_type, inputs, attributes, opset = resample_cases(dtype)[case]
    check_forward(op_type, inputs, attributes, 1, opset)


@pytest.mark.parametrize("case", RESAMPLE_CASES)
def test_resampling_gradients(case):
    op_type, inputs, attributes, opset = resample_cases(np.float64)[case]
    # (nearest GridSample: piecewise constant in the grid, whose gradient is zero in both)
    check_gradients(op_type, inputs, attributes, opset)


def check_gradients_numerically(op_type, inputs, attributes, opset, eps=1e-6, outputs=1,
                                tolerance=None):
    """For operators the reference executor lacks: d loss / d (float inputs) against
    central differences of the PyTorch executor's own loss (float64: truncation error
    O(eps²), roundoff O(1e-16/eps) = 1e-10)."""
    rng = np.random.default_rng(11)
    dtype = next(v.dtype for v in inputs.values()
                 if v is not None and np.issubdtype(v.dtype, np.floating))
    params = {n for n, v in inputs.items()
              if v is not None and np.issubdtype(v.dtype, np.floating)}
    probe = one_node(op_type, inputs, attributes, outputs, opset, params=params)
    shape = d5pt.from_onnx(probe).inference({})["y0"].shape
    loss_nodes = [helper.make_node("Mul", ["y0", "loss_R"], ["weighted"]),
                  helper.make_node("ReduceSum", ["weighted"], ["loss"], keepdims=0)]
    weights = {"loss_R": rng.standard_normal(shape).astype(dtype)}
    model = one_node(op_type, inputs, attributes, outputs, opset, params=params,
                     extra_nodes=loss_nodes, extra_inits=weights, graph_outputs=["loss"])
    executor = d5pt.from_onnx(model)
    got = executor.inference_and_backprop({}, "loss")
    network = executor.network
    for name in sorted(params):
        value = network.fetch_tensor(name)
        numeric = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            for sign in (1, -1):
                shifted = value.copy()
                shifted[index] += sign * eps
                network.feed_tensor(name, shifted)
                numeric[index] += sign * np.float64(executor.inference({})["loss"])
            numeric[index] /= 2 * eps
        network.feed_tensor(name, value)
        np.testing.assert_allclose(got[gradient_name(name)], numeric, err_msg=name,
                                   **(tolerance or dict(rtol=1e-6, atol=1e-8)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 2, 4]], ids=["2d", "3d"])
def test_affinegrid(size, align, dtype):
    rng = np.random.default_rng(len(size) + align)
    theta = rand(rng, size[0], len(size) - 2, len(size) - 1, dtype=dtype)
    inputs = {"theta": theta, "size": np.array(size, np.int64)}
    # onnx's reference builds its base grid in float32 (the reference executor has no
    # AffineGrid): float32 tolerances for float64 too.
    check_forward("AffineGrid", inputs, {"align_corners": align}, opset=20, oracle="onnx",
                  tolerance=FORWARD_TOL[np.float32])
    if dtype == np.float64:
        check_gradients_numerically("AffineGrid", inputs, {"align_corners": align}, 20)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    rng = np.random.default_rng(1)
    inputs = {"X": rand(rng, 1, 2, 3, 2), "scales": np.array([1, 1, 2, 3], np.float32)}
    check_forward("Upsample", inputs, {"mode": mode}, opset=9)
    inputs["X"] = inputs["X"].astype(np.float32)
    # onnx's reference implements nearest Upsample only
    check_forward("Upsample", inputs, {"mode": mode}, opset=9,
                  oracle="onnx" if mode == "nearest" else "d5ref")
    check_gradients("Upsample", {"X": rand(rng, 1, 2, 3, 2), "scales": inputs["scales"]},
                    {"mode": mode}, opset=9)


ROI_ALIGN_CASES = {
    "avg_half_pixel": {"output_height": 3, "output_width": 2, "spatial_scale": 0.5},
    "avg_output_half_pixel_ratio2": {"coordinate_transformation_mode": "output_half_pixel",
                                     "sampling_ratio": 2, "output_height": 2,
                                     "output_width": 2},
    "max": {"mode": "max", "output_height": 2, "output_width": 3},
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(ROI_ALIGN_CASES))
def test_roialign(case, dtype):
    """Regions inside, across the border and outside the image; the reference executor
    has no RoiAlign, so gradients (w.r.t. X and the regions) are checked numerically
    (no sample sits on an integer coordinate, where bilinear weights have a kink)."""
    rng = np.random.default_rng(len(case))
    inputs = {"X": rand(rng, 2, 3, 6, 7, dtype=dtype),
              "rois": np.array([[0.3, 1.1, 5.2, 4.7], [2.6, -1.4, 8.3, 3.2],
                                [6.3, 5.1, 9.4, 9.3]], dtype),
              "batch": np.array([1, 0, 1], np.int64)}
    attributes = ROI_ALIGN_CASES[case]
    check_forward("RoiAlign", inputs, attributes, opset=22, oracle="onnx",
                  tolerance=FORWARD_TOL[np.float32])
    if dtype == np.float64:
        check_gradients_numerically("RoiAlign", inputs, attributes, 22)


@pytest.mark.parametrize("output_shape", [None, [1, 2, 5, 6]], ids=["inferred", "given"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maxunpool(output_shape, dtype):
    """Indices as MaxPool gives them (flat over the whole tensor)."""
    rng = np.random.default_rng(2)
    pooled, planes = torch.nn.functional.max_pool2d(torch.from_numpy(rand(rng, 1, 2, 4, 4)),
                                                    2, 2, return_indices=True)
    offsets = (torch.arange(2) * 16).view(1, 2, 1, 1)
    inputs = {"X": pooled.numpy().astype(dtype), "I": (planes + offsets).numpy(),
              "shape": None if output_shape is None else np.array(output_shape, np.int64)}
    attributes = {"kernel_shape": [2, 2], "strides": [2, 2]}
    check_forward("MaxUnpool", inputs, attributes, opset=22, oracle="onnx")
    check_forward("MaxUnpool", inputs, attributes, opset=22, oracle="d5ref")
    if dtype == np.float64:
        check_gradients("MaxUnpool", inputs, attributes, opset=22)


@pytest.mark.parametrize("with_mask", [False, True], ids=["plain", "mask_bias"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_deformconv(with_mask, dtype):
    """Offsets move taps off the grid and outside the image; the reference executor has
    no DeformConv: onnx's reference for values (float32 tolerances, it samples through
    float32 grids), central differences for gradients w.r.t. every input."""
    rng = np.random.default_rng(3 + with_mask)
    n, c, group, offset_group = 1, 4, 2, 2
    inputs = {"X": rand(rng, n, c, 4, 5, dtype=dtype), "W": rand(rng, 6, c // group, 2, 2,
                                                                  dtype=dtype),
              "offset": rand(rng, n, offset_group * 2 * 2 * 2, 3, 3, dtype=dtype) * 1.3,
              "B": rand(rng, 6, dtype=dtype) if with_mask else None,
              "mask": rng.uniform(size=(n, offset_group * 4, 3, 3)).astype(dtype)
              if with_mask else None}
    attributes = {"group": group, "offset_group": offset_group, "pads": [1, 0, 0, 1],
                  "strides": [1, 2], "dilations": [2, 1]}
    check_forward("DeformConv", inputs, attributes, opset=22, oracle="onnx",
                  tolerance=FORWARD_TOL[np.float32])
    if dtype == np.float64:
        check_gradients_numerically("DeformConv", inputs, attributes, 22)


def test_resize_with_scales_computed_at_run_time():
    """scales from a graph input: the plans are made when the shape is seen."""
    rng = np.random.default_rng(0)
    x = rand(rng, 1, 1, 3, 4, dtype=np.float32)
    scales = np.array([1, 1, 2, 0.5], np.float32)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1, 3, 4]),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("abcd"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    want = ReferenceEvaluator(model).run(None, {"x": x, "s": scales})[0]
    got = d5pt.from_onnx(model).inference({"x": x, "s": scales})["y"]
    np.testing.assert_allclose(got, want, **FORWARD_TOL[np.float32])


def test_recurrent_rejects_unknown_activation():
    inputs = recurrent_inputs("RNN", np.random.default_rng(0), np.float32)
    model = one_node("RNN", inputs, {"hidden_size": 2, "activations": ["Swish"]}, 1, 22)
    with pytest.raises(Deep500Error, match="Swish"):
        d5pt.from_onnx(model).inference({"X": inputs["X"], "W": inputs["W"],
                                         "R": inputs["R"], "B": inputs["B"]})


def test_onnx_checker_accepts_the_models():
    """The one-node models are valid ONNX (so the cases test the spec, not a typo)."""
    op_type, inputs, attributes, outputs = RECURRENT_CASES["lstm_layout1_clip"]
    model = one_node(op_type, recurrent_inputs(op_type, np.random.default_rng(0),
                                               np.float32, layout=1, initial=True),
                     attributes, outputs, 22)
    onnx.checker.check_model(model)


# -- models exported fresh by torch.onnx.export ----------------------------------------
class _SequenceBlocks(torch.nn.Module):
    """What exporters emit for recurrent layers, normalizations and resampling: LSTM
    (bidirectional, batch first), GRU, LayerNorm, GroupNorm (as InstanceNormalization),
    bilinear and bicubic interpolate (Resize), grid_sample (GridSample)."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(3, 4, bidirectional=True, batch_first=True)
        self.gru = torch.nn.GRU(8, 5)
        self.norm = torch.nn.LayerNorm(5)
        self.groups = torch.nn.GroupNorm(2, 4)

    def forward(self, x, image):
        y, _ = self.lstm(x)
        z, h = self.gru(y.transpose(0, 1))
        F = torch.nn.functional
        up = F.interpolate(image, scale_factor=2, mode="bilinear", align_corners=False)
        cubic = F.interpolate(image, size=(3, 7), mode="bicubic", align_corners=True)
        grid = x[:1, :4, :2].reshape(1, 2, 2, 2).tanh()
        sampled = F.grid_sample(image, grid, align_corners=False)
        return self.norm(z), h, self.groups(up), cubic, sampled


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_exported_sequence_blocks_match_torch(dynamo, tmp_path):
    if dynamo:
        pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    module = _SequenceBlocks().eval()
    x, image = torch.randn(2, 6, 3), torch.randn(1, 4, 5, 6)
    path = tmp_path / "blocks.onnx"
    try:
        torch.onnx.export(module, (x, image), str(path), opset_version=17 if not dynamo
                          else 18, dynamo=dynamo, input_names=["x", "image"])
    except Exception as exc:   # the exporter itself, not the executor under test
        pytest.skip(f"torch.onnx.export (dynamo={dynamo}) failed here: {exc}")
    model = onnx.load(str(path))
    ops = {n.op_type for n in model.graph.node}
    assert {"LSTM", "GRU", "Resize", "GridSample", "LayerNormalization",
            "InstanceNormalization"} <= ops, ops
    got = d5pt.from_onnx(model).inference({"x": x.numpy(), "image": image.numpy()})
    with torch.no_grad():
        want = module(x, image)
    for output, expected in zip(model.graph.output, want):
        np.testing.assert_allclose(got[output.name], expected.numpy(),
                                   err_msg=output.name, **FORWARD_TOL[np.float32])
