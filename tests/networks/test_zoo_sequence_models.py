"""The zoo's sequence models (transformer, gpt, lstm): valid ONNX with int64 token
inputs, reproducible, of the documented size, computing what their docstrings say (a
NumPy re-implementation against onnxruntime), a causal gpt, padding that is really
masked, and every executor agreeing with onnxruntime on outputs and with the reference
on gradients (which finite differences check)."""
import importlib
import math

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
import pytest
from onnx import TensorProto

import deep500 as d5
from deep500.networks import OPSET, create_model, parameter_count
from deep500.utils.errors import Deep500Error, UnsupportedError

ort = pytest.importorskip("onnxruntime")

SEQUENCE_MODELS = ("transformer", "gpt", "lstm")
STEPS, VOCAB, BATCH = 6, 7, 3
# Small configurations: every code path (2 blocks, 2 heads, padding) at test speed.
SMALL = {
    "transformer": dict(input_shape=(STEPS,), vocab=VOCAB, hidden=8, heads=2, depth=2,
                        classes=3),
    "gpt": dict(input_shape=(STEPS,), classes=VOCAB, hidden=8, heads=2, depth=2),
    "lstm": dict(input_shape=(STEPS,), vocab=VOCAB, embedding=4, hidden=5, classes=3),
}
# float32 networks evaluated in different summation orders: relative L2 bounds.
OUTPUT_RTOL = 1e-4
GRADIENT_RTOL = 1e-4
TRAINING_EXECUTORS = ("reference", "pytorch", "tensorflow")
# (executor, model) pairs whose operators the executor lacks, with the operator named:
# such a pair gets a strict xfail(raises=UnsupportedError) mark, which fails as soon as
# the operator lands (then delete the entry). Every training executor runs all three
# models since issue 19 (PyTorch and TensorFlow gained LayerNormalization and LSTM).
MISSING: dict = {}


def pairs():
    for executor in TRAINING_EXECUTORS:
        for model in SEQUENCE_MODELS:
            marks = []
            if (executor, model) in MISSING:
                marks = [pytest.mark.xfail(raises=UnsupportedError, strict=True,
                                           reason=f"{executor} lacks "
                                                  f"{MISSING[executor, model]}")]
            yield pytest.param(executor, model, marks=marks, id=f"{executor}-{model}")


def small(name, **options):
    return create_model(name, batch_size=BATCH, **{**SMALL[name], **options})


def tokens(seed=0, batch=BATCH):
    """Token ids with padding: row 1 ends in 2 padding tokens, row 2 in 4."""
    x = np.random.default_rng(seed).integers(1, VOCAB, (batch, STEPS))
    x[1 % batch, STEPS - 2:] = 0
    x[2 % batch, STEPS - 4:] = 0
    return x.astype(np.int64)


def labels(name, seed=1, batch=BATCH):
    rng = np.random.default_rng(seed)
    return rng.integers(0, VOCAB, (batch, STEPS)) if name == "gpt" else rng.integers(0, 3, batch)


def run(proto, feeds) -> dict:
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def weights(proto) -> dict:
    return {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}


def relative_l2(got, want):
    want = np.asarray(want, np.float64)
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) /
                 max(np.linalg.norm(want), 1e-30))


# -- a NumPy re-implementation of the docstrings ---------------------------------------
def _layernorm(x, w, name):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * w[f"{name}.scale"] + w[f"{name}.bias"]


def _linear(x, w, name):
    return x @ w[f"{name}.weight"] + w[f"{name}.bias"]


def _block(x, w, name, heads, masked):
    n, t, d = x.shape
    dh = d // heads
    h = _layernorm(x, w, f"{name}.norm1")
    q, k, v = (_linear(h, w, f"{name}.attn.{r}").reshape(n, t, heads, dh).transpose(0, 2, 1, 3)
               for r in "qkv")
    scores = np.where(masked, -1e9, q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh))
    p = np.exp(scores - scores.max(-1, keepdims=True))
    context = (p / p.sum(-1, keepdims=True)) @ v
    x = x + _linear(context.transpose(0, 2, 1, 3).reshape(n, t, d), w, f"{name}.attn.out")
    h = _linear(_layernorm(x, w, f"{name}.norm2"), w, f"{name}.ffn1")
    gelu = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    return x + _linear(gelu, w, f"{name}.ffn2")


def numpy_forward(name, w, x, heads=2, depth=2):
    w = {k: v.astype(np.float64) for k, v in w.items()}
    h = w["embed.weight"][x]
    if name == "lstm":
        weight, recurrent, bias = w["lstm.W"][0], w["lstm.R"][0], w["lstm.B"][0]
        units = recurrent.shape[1]
        state, cell = np.zeros((len(x), units)), np.zeros((len(x), units))
        sigmoid = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
        for t in range(x.shape[1]):
            gates = h[:, t] @ weight.T + state @ recurrent.T + bias[:4 * units] + bias[4 * units:]
            i, o, f, c = np.split(gates, 4, axis=1)            # ONNX gate order i, o, f, c
            cell = sigmoid(f) * cell + sigmoid(i) * np.tanh(c)
            state = sigmoid(o) * np.tanh(cell)
        return state @ w["head.weight"].T + w["head.bias"]
    h = h + w["pos_embed.weight"]
    steps = x.shape[1]
    pad = x == 0
    masked = (np.triu(np.ones((steps, steps), bool), 1) if name == "gpt"
              else pad[:, None, None, :])
    for index in range(depth):
        h = _block(h, w, f"layer{index}", heads, masked)
    h = _layernorm(h, w, "norm")
    if name == "gpt":
        return _linear(h, w, "lm_head").transpose(0, 2, 1)
    keep = (~pad).astype(np.float64)
    pooled = np.einsum("nt,ntd->nd", keep / np.maximum(keep.sum(1, keepdims=True), 1), h)
    return pooled @ w["head.weight"].T + w["head.bias"]


# -- structure ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", SEQUENCE_MODELS)
def test_valid_onnx_with_int64_token_input(name):
    proto = create_model(name, batch_size=2)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.opset_import[0].version == OPSET
    (value,) = proto.graph.input
    assert value.name == "input" and value.type.tensor_type.elem_type == TensorProto.INT64
    assert [d.dim_value for d in value.type.tensor_type.shape.dim] == [2, 32]
    inferred = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    output = inferred.graph.output[0].type.tensor_type
    expected = {"transformer": [2, 2], "gpt": [2, 16, 32], "lstm": [2, 2]}[name]
    assert output.elem_type == TensorProto.FLOAT
    assert [d.dim_value for d in output.shape.dim] == expected
    # Constants are Constant nodes, so the only initializers are trainable parameters.
    assert all(t.data_type == TensorProto.FLOAT for t in proto.graph.initializer)


def test_operators_are_those_documented():
    ops = {name: {n.op_type for n in create_model(name).graph.node} for name in SEQUENCE_MODELS}
    attention = {"Gather", "Add", "LayerNormalization", "MatMul", "Reshape", "Transpose",
                 "Div", "Where", "Softmax", "Erf", "Mul", "Constant"}
    assert attention <= ops["transformer"] and attention <= ops["gpt"]
    assert {"Equal", "Unsqueeze", "Cast", "ReduceSum", "Gemm"} <= ops["transformer"]
    assert "Trilu" not in ops["gpt"] and "Equal" not in ops["gpt"]   # constant causal mask
    assert ops["lstm"] == {"Gather", "Transpose", "LSTM", "Squeeze", "Constant", "Gemm"}


def test_gelu_is_written_as_torch_onnx_export_writes_it():
    nodes = [n for n in create_model("gpt", depth=1).graph.node if n.name.startswith("layer0.gelu")]
    assert [n.op_type for n in nodes] == ["Constant", "Div", "Erf", "Constant", "Add", "Mul",
                                          "Constant", "Mul"]
    constants = {n.name: onnx.numpy_helper.to_array(n.attribute[0].t) for n in nodes
                 if n.op_type == "Constant"}
    assert sorted(float(v) for v in constants.values()) == pytest.approx([0.5, 1.0, math.sqrt(2)])


def _wiring(nodes, x):
    """(op_type, inputs as producer op types or 'x', constant value) per node."""
    producer = {out: n for n in nodes for out in n.output}
    rows = []
    for n in nodes:
        value = (float(onnx.numpy_helper.to_array(n.attribute[0].t))
                 if n.op_type == "Constant" else None)
        rows.append((n.op_type, tuple("x" if i == x else producer[i].op_type for i in n.input),
                     None if value is None else round(value, 6)))
    return rows


def test_gelu_matches_a_fresh_torch_onnx_export():
    """torch.onnx.export(nn.GELU(), opset_version=17, dynamo=False) and the zoo's GELU
    are the same nodes with the same constants, wired the same way."""
    torch = pytest.importorskip("torch")
    import contextlib
    import io
    import warnings
    buffer = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.nn.GELU(), (torch.randn(2, 3),), buffer, opset_version=17,
                          dynamo=False)
    exported = onnx.load_from_string(buffer.getvalue()).graph
    ours = [n for n in create_model("gpt", depth=1).graph.node
            if n.name.startswith("layer0.gelu")]
    assert _wiring(ours, "layer0.ffn1") == _wiring(exported.node, exported.input[0].name)


@pytest.mark.parametrize("name", SEQUENCE_MODELS)
def test_same_arguments_give_identical_bytes(name):
    first = create_model(name, seed=4, **SMALL[name]).SerializeToString()
    assert first == create_model(name, seed=4, **SMALL[name]).SerializeToString()
    one, other = weights(small(name, seed=0)), weights(small(name, seed=1))
    assert one.keys() == other.keys()
    for key, value in one.items():
        constant = key.endswith(("norm1.scale", "norm1.bias", "norm2.scale", "norm2.bias")) \
            or key in ("norm.scale", "norm.bias")
        assert np.array_equal(value, other[key]) == constant, key


def _blocks(d, f, depth):
    return depth * (4 * (d * d + d) + 2 * d * f + f + d + 4 * d)


@pytest.mark.parametrize("name, options, expected", [
    # V·D + T·D + blocks + final LN + head (see the module docstrings)
    ("transformer", {}, 16 * 32 + 32 * 32 + _blocks(32, 128, 2) + 2 * 32 + 32 * 2 + 2),
    ("transformer", {"hidden": 64, "heads": 8, "depth": 3, "ffn": 100, "vocab": 50,
                     "input_shape": (20,), "classes": 5},
     50 * 64 + 20 * 64 + _blocks(64, 100, 3) + 2 * 64 + 64 * 5 + 5),
    ("gpt", {}, 16 * 32 + 32 * 32 + _blocks(32, 128, 2) + 2 * 32 + 32 * 16 + 16),
    ("gpt", {"classes": 30, "vocab": 40, "hidden": 16, "heads": 4, "depth": 1},
     40 * 16 + 32 * 16 + _blocks(16, 64, 1) + 2 * 16 + 16 * 30 + 30),
    # V·E + 4H·E + 4H·H + 8H + H·C + C
    ("lstm", {}, 16 * 32 + 4 * 64 * 32 + 4 * 64 * 64 + 8 * 64 + 64 * 2 + 2),
    ("lstm", {"embedding": 10, "hidden": 20, "vocab": 100, "classes": 4},
     100 * 10 + 4 * 20 * 10 + 4 * 20 * 20 + 8 * 20 + 20 * 4 + 4),
])
def test_parameter_counts_by_hand(name, options, expected):
    assert parameter_count(create_model(name, **options)) == expected


def test_defaults_count_as_torch_counts_them():
    """torch's modules of the same sizes (pre-LN encoder layers, embeddings, LSTM, Linear)
    have as many parameters as the ONNX models."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    lstm = nn.ModuleList([nn.Embedding(16, 32), nn.LSTM(32, 64), nn.Linear(64, 2)])
    assert parameter_count(create_model("lstm")) == sum(p.numel() for p in lstm.parameters())
    block = nn.TransformerEncoderLayer(32, 4, 128, norm_first=True)
    encoder = sum(p.numel() for p in block.parameters()) * 2 + (16 + 32) * 32 + 2 * 32
    assert parameter_count(create_model("transformer")) == encoder + 32 * 2 + 2
    assert parameter_count(create_model("gpt")) == encoder + 32 * 16 + 16


def test_options_are_checked():
    with pytest.raises(Deep500Error, match="multiple of heads=3"):
        create_model("transformer", hidden=32, heads=3)
    with pytest.raises(Deep500Error, match="pad_token=9 is not a token id"):
        create_model("transformer", vocab=8, pad_token=9)
    with pytest.raises(Deep500Error, match="input_shape is \\(sequence_length,\\)"):
        create_model("gpt", input_shape=(3, 32, 32))
    with pytest.raises(Deep500Error, match="vocab must be at least 2"):
        create_model("lstm", vocab=1)
    with pytest.raises(Deep500Error, match="must be positive"):
        create_model("lstm", hidden=0)
    with pytest.raises(Deep500Error, match="does not take the options \\['width'\\]"):
        create_model("gpt", width=3)


# -- what the models compute -------------------------------------------------------------
@pytest.mark.parametrize("name", SEQUENCE_MODELS)
def test_onnxruntime_computes_the_documented_model(name):
    proto = small(name)
    x = tokens()
    y = run(proto, {"input": x})["output"]
    assert y.shape == {"gpt": (BATCH, VOCAB, STEPS)}.get(name, (BATCH, 3))
    assert np.all(np.isfinite(y))
    # float32 (onnxruntime) against float64 (NumPy) through ~30 operators
    np.testing.assert_allclose(y, numpy_forward(name, weights(proto), x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", SEQUENCE_MODELS)
def test_symbolic_batch(name):
    proto = create_model(name, batch_size="N", **SMALL[name])
    for batch in (1, 5):
        y = run(proto, {"input": tokens(batch=batch)})["output"]
        assert y.shape[0] == batch and np.all(np.isfinite(y))


def test_gpt_is_causal():
    """Changing the token at position k changes no logit at a position before k (the
    masked weights are exactly 0), and does change those at k and after."""
    proto = small("gpt")
    x = tokens()
    x[:] = np.random.default_rng(5).integers(0, VOCAB, x.shape)
    base = run(proto, {"input": x})["output"]
    for k in range(STEPS):
        changed = x.copy()
        changed[:, k] = (changed[:, k] + 1) % VOCAB
        y = run(proto, {"input": changed})["output"]
        np.testing.assert_allclose(y[:, :, :k], base[:, :, :k], rtol=0, atol=1e-6)
        assert np.abs(y[:, :, k:] - base[:, :, k:]).max(axis=1).min() > 1e-4


def test_transformer_ignores_padding_positions():
    """Padding positions are masked as keys and left out of the pooled mean: the logits do
    not depend on the position embeddings of padded positions (while those of real tokens
    do matter), and a sequence of padding only still gives finite logits."""
    proto = small("transformer")
    x = tokens()
    base = run(proto, {"input": x})["output"]
    for row, real in ((1, STEPS - 2), (2, STEPS - 4)):
        edited = onnx.ModelProto()
        edited.CopyFrom(proto)
        table = [t for t in edited.graph.initializer if t.name == "pos_embed.weight"][0]
        value = onnx.numpy_helper.to_array(table).copy()
        # not a uniform shift, which every LayerNormalization would remove anyway
        value[real:] += 3 * np.random.default_rng(row).standard_normal(value[real:].shape)
        table.CopyFrom(onnx.numpy_helper.from_array(value, table.name))
        y = run(edited, {"input": x})["output"]
        np.testing.assert_allclose(y[row], base[row], rtol=1e-5, atol=1e-6)
        assert np.abs(y[0] - base[0]).max() > 1e-3        # row 0 has no padding
    all_padding = np.zeros((BATCH, STEPS), np.int64)
    assert np.all(np.isfinite(run(proto, {"input": all_padding})["output"]))


def test_gpt_loss_covers_every_position():
    proto = small("gpt", loss="softmax_cross_entropy")
    onnx.checker.check_model(proto, full_check=True)
    label = [i for i in proto.graph.input if i.name == "labels"][0].type.tensor_type
    assert [d.dim_value for d in label.shape.dim] == [BATCH, STEPS]
    x, y = tokens(), labels("gpt")
    out = run(proto, {"input": x, "labels": y})
    logits = out["output"].astype(np.float64)                  # [N, V, T]
    logits = logits - logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -np.take_along_axis(log_p, y[:, None, :], axis=1).mean()
    np.testing.assert_allclose(out["loss"], expected, rtol=1e-5)


# -- executors agree -----------------------------------------------------------------------
def executor(name, model):
    return importlib.import_module(f"deep500.frameworks.{name}").from_onnx(model)


@pytest.mark.parametrize("executor_name, name", list(pairs()))
def test_inference_agrees_with_onnxruntime(executor_name, name):
    proto = small(name)
    x = tokens()
    expected = run(proto, {"input": x})["output"]
    got = executor(executor_name, proto).inference({"input": x})["output"]
    assert relative_l2(got, expected) <= OUTPUT_RTOL


def key_bias(param: str) -> bool:
    """Attention key biases add q·b_k to a whole row of scores, which softmax ignores:
    their gradient is exactly 0, and only float rounding is left to compare."""
    return param.endswith(".attn.k.bias")


@pytest.mark.parametrize("executor_name, name", list(pairs()))
def test_gradients_agree_with_the_reference(executor_name, name):
    """Loss and every parameter's gradient against the reference executor's, whose
    gradients test_reference_gradients_match_finite_differences checks."""
    proto = small(name, loss="softmax_cross_entropy")
    feeds = {"input": tokens(), "labels": labels(name)}
    candidate = executor(executor_name, proto)
    got = candidate.inference_and_backprop(feeds, "loss")
    expected_loss = run(proto, feeds)["loss"]
    assert relative_l2(got["loss"], expected_loss) <= OUTPUT_RTOL
    reference = executor("reference", proto)
    expected = reference.inference_and_backprop(feeds, "loss")
    params = reference.network.get_params()
    assert sorted(candidate.network.get_params()) == sorted(params) == sorted(weights(proto))
    scale = math.sqrt(sum(float(np.sum(np.square(expected[d5.gradient_name(p)])))
                          for p in params))
    for param in params:
        grad = d5.gradient_name(param)
        if key_bias(param):
            assert np.linalg.norm(got[grad]) <= 1e-6 * scale, param
        else:
            assert relative_l2(got[grad], expected[grad]) <= GRADIENT_RTOL, param


def numpy_loss(name, values, feeds) -> float:
    logits = numpy_forward(name, values, feeds["input"])
    logits = logits - logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    y = feeds["labels"]
    return float(-np.take_along_axis(log_p, np.expand_dims(y, 1), axis=1).mean())


@pytest.mark.parametrize("name", SEQUENCE_MODELS)
def test_reference_gradients_match_finite_differences(name):
    """The reference executor's gradient of the float64 model, projected on a random
    direction u, against (L(θ + εu) − L(θ − εu)) / 2ε of the float64 NumPy
    re-implementation (truncation O(ε²) and rounding O(1e-16/ε) are below 1e-9 at
    ε = 1e-5). The tolerance 1e-6 is set by the reference's LayerNormalization, which
    computes in float32 as its default stash_type=1 says, even in a float64 model."""
    proto = small(name, loss="softmax_cross_entropy", dtype="float64")
    feeds = {"input": tokens(), "labels": labels(name)}
    values = weights(proto)
    result = executor("reference", proto).inference_and_backprop(feeds, "loss")
    assert numpy_loss(name, values, feeds) == pytest.approx(float(result["loss"]), rel=1e-7)
    rng = np.random.default_rng(7)
    direction = {k: rng.standard_normal(v.shape) for k, v in values.items()}
    analytic = sum(float((result[d5.gradient_name(k)] * u).sum()) for k, u in direction.items())
    epsilon = 1e-5
    moved = [{k: v + step * direction[k] for k, v in values.items()}
             for step in (epsilon, -epsilon)]
    numeric = (numpy_loss(name, moved[0], feeds) - numpy_loss(name, moved[1], feeds)) \
        / (2 * epsilon)
    assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-9)


# -- the shipped training recipe -----------------------------------------------------------
@pytest.mark.parametrize("model_name, epochs", [("transformer", 2), ("lstm", 1)])
def test_sequence_training_recipe(repo_root, model_name, epochs):
    """recipes/sequence_training.yaml trains both models in every training executor, and
    on the reference executor each reaches the recipe's own accuracy threshold in fewer
    than the recipe's epochs."""
    from deep500.frameworks import reference
    from deep500.frameworks.reference.optimizers import AdamOptimizer
    from deep500.recipe import load_recipe
    recipe = load_recipe(str(repo_root / "recipes" / "sequence_training.yaml"))
    configurations = recipe.configurations()
    assert {(c["executor"], c["network"].model) for c in configurations} == {
        (e, m) for e in TRAINING_EXECUTORS for m in ("transformer", "lstm")}
    assert [t.text for t in recipe.acceptance] == ["TestAccuracy.final >= 0.95"]
    config = next(c for c in configurations
                  if (c["executor"], c["network"].model) == ("reference", model_name))
    assert config["epochs"] > epochs
    options = dict(config["dataset"])
    train, test = d5.load_dataset(options.pop("name"), **options)
    model = create_model(model_name, loss=config["loss"], seed=config["seed"],
                         input_shape=train.sample_shape, classes=train.classes,
                         **dict(config["network"].options))
    executor_ = reference.from_onnx(model)
    optimizer = AdamOptimizer(executor_, loss="loss",
                              **config["optimizer"].hyperparameters)
    result = d5.test_training(executor_, train, test, optimizer, epochs=epochs,
                              batch_size=config["batch_size"], seed=config["seed"],
                              metrics=[d5.TestAccuracy()], test_batch_size=256)
    assert result["TestAccuracy"].summary["final"] >= 0.95
