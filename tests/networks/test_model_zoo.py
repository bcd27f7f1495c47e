"""The model zoo builds valid ONNX that runs in onnxruntime, its seeds are reproducible,
its sizes match the papers, and attached losses compute what they say."""
import functools

import numpy as np
import onnx
import onnx.checker
import onnx.numpy_helper
import pytest
from onnx import TensorProto, helper

from deep500.networks import OPSET, create_model, model_names, parameter_count
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from deep500.utils.onnx_interop import load_and_parse_model
from deep500.utils.onnx_interop.losses import LOSSES, add_loss

ort = pytest.importorskip("onnxruntime")

IMAGENET = {"resnet18", "resnet34", "resnet50", "resnet101", "vgg16", "densenet121"}
SLOW = {"resnet50", "resnet101", "vgg16", "wrn28_10"}
# Small inputs keep the run fast; ImageNet ResNets accept any resolution, VGG-16 and
# DenseNet-121 down to 32×32 (tests/networks/test_zoo_imagenet_models.py has more).
TEST_OPTIONS = {name: {"input_shape": (3, 32, 32)} for name in IMAGENET}


@functools.lru_cache(maxsize=None)
def _cached(name, batch_size=2, seed=0, **options) -> bytes:
    options = {**TEST_OPTIONS.get(name, {}), **options}
    return create_model(name, batch_size=batch_size, seed=seed, **options
                        ).SerializeToString()


def model(name, **options) -> onnx.ModelProto:
    return onnx.load_from_string(_cached(name, **options))


def run(proto: onnx.ModelProto, feeds: dict) -> dict:
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def input_shape(proto: onnx.ModelProto) -> tuple:
    return tuple(d.dim_value or d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim)


def initializers(proto: onnx.ModelProto) -> dict:
    return {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}


def _params(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


# Token models take int64 [N, T] inputs: tests/networks/test_zoo_sequence_models.py.
SEQUENCE_MODELS = ("transformer", "gpt", "lstm")


@pytest.mark.parametrize("name", _params([n for n in model_names()
                                          if n not in SEQUENCE_MODELS]))
def test_model_builds_checks_and_runs(name):
    proto = model(name)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.opset_import[0].version == OPSET
    assert [i.name for i in proto.graph.input] == ["input"]
    assert [o.name for o in proto.graph.output] == ["output"]
    shape = input_shape(proto)
    assert shape[0] == 2 and len(shape) == 4
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    y = run(proto, {"input": x})["output"]
    assert y.shape == (2, 1000 if name in IMAGENET else 10)
    assert np.all(np.isfinite(y))
    parsed = load_and_parse_model(proto)
    assert [v.name for v in parsed.feed_inputs] == ["input"]


def test_symbolic_batch_size():
    proto = create_model("lenet", batch_size="N")
    assert input_shape(proto) == ("N", 1, 28, 28)
    onnx.checker.check_model(proto, full_check=True)
    for batch in (1, 5):
        x = np.zeros((batch, 1, 28, 28), np.float32)
        assert run(proto, {"input": x})["output"].shape == (batch, 10)


@pytest.mark.parametrize("name", ["mlp", "lenet", "resnet20", "wrn16_4"])
def test_same_seed_gives_identical_bytes(name):
    assert create_model(name, seed=3).SerializeToString() == \
        create_model(name, seed=3).SerializeToString()
    first, other = initializers(model(name, seed=0)), initializers(model(name, seed=1))
    assert first.keys() == other.keys()
    for key, value in first.items():
        drawn = key.endswith(".weight") or (key.startswith("fc") and key.endswith(".bias"))
        if drawn:  # random weights differ; batch-norm and conv-bias constants do not
            assert not np.array_equal(value, other[key]), key
        else:
            np.testing.assert_array_equal(value, other[key])


def test_initial_weight_distributions():
    weights = initializers(create_model("resnet56", seed=5))
    w = weights["layer3.8.conv1.conv.weight"]           # 64 × 64 × 3 × 3
    assert w.shape == (64, 64, 3, 3)
    assert w.std() == pytest.approx(np.sqrt(2 / (64 * 9)), rel=0.02)   # He normal
    assert abs(w.mean()) < 0.01
    fc = weights["fc.weight"]
    bound = 1 / np.sqrt(64)
    assert fc.shape == (10, 64) and np.all(np.abs(fc) <= bound)
    assert np.all(weights["layer1.0.conv1.bn.scale"] == 1)
    assert np.all(weights["layer1.0.conv1.bn.bias"] == 0)
    assert np.all(weights["layer1.0.conv1.bn.mean"] == 0)
    assert np.all(weights["layer1.0.conv1.bn.var"] == 1)


@pytest.mark.parametrize("name, options, paper", [
    ("resnet20", {}, 0.27e6),                          # He et al. 2016, Table 6
    ("resnet110", {}, 1.7e6),
    ("resnet18", {}, 11.7e6),                          # torchvision: 11,689,512
    ("resnet34", {}, 21.8e6),
    pytest.param("resnet50", {}, 25.6e6, marks=pytest.mark.slow),
    ("wrn40_4", {}, 8.9e6),                            # Zagoruyko & Komodakis, Table 4
    ("wide_resnet", {"depth": 16, "width": 8}, 11.0e6),
])
def test_parameter_counts_match_papers(name, options, paper):
    assert parameter_count(model(name, **options)) == pytest.approx(paper, rel=0.02)


def test_imagenet_resnet_counts_exactly_as_torchvision():
    assert parameter_count(model("resnet18")) == 11_689_512


@pytest.mark.parametrize("input_shape, flat", [((1, 28, 28), 400), ((3, 32, 32), 400),
                                              ((1, 8, 8), 64), ((1, 12, 20), 16 * 3 * 5)])
def test_lenet_pads_small_inputs(input_shape, flat):
    proto = create_model("lenet", batch_size=1, input_shape=input_shape)
    onnx.checker.check_model(proto, full_check=True)
    assert initializers(proto)["fc1.weight"].shape == (120, flat)
    x = np.ones((1, *input_shape), np.float32)
    assert run(proto, {"input": x})["output"].shape == (1, 10)


def test_model_options_and_errors():
    proto = create_model("mlp", batch_size=4, input_shape=(3, 4, 4), hidden=(7,), classes=3)
    assert run(proto, {"input": np.ones((4, 3, 4, 4), np.float32)})["output"].shape == (4, 3)
    with pytest.raises(Deep500Error, match="unknown model 'resnet19'"):
        create_model("resnet19")
    with pytest.raises(Deep500Error, match="does not take the options \\['depth'\\]"):
        create_model("mlp", depth=3)
    with pytest.raises(ShapeError, match="too small"):
        create_model("lenet", input_shape=(1, 2, 2))
    with pytest.raises(ShapeError, match="positive sizes"):
        create_model("resnet20", input_shape=(3, 0, 8))
    with pytest.raises(Deep500Error, match="6n\\+2"):
        create_model("resnet20", depth=21)
    with pytest.raises(Deep500Error, match="6n\\+4"):
        create_model("wide_resnet", depth=20)
    with pytest.raises(Deep500Error, match="18, 34, 50, 101"):
        create_model("resnet18", depth=152)
    with pytest.raises(Deep500Error, match="dtype"):
        create_model("mlp", dtype="int8")
    with pytest.raises(Deep500Error, match="batch_size"):
        create_model("mlp", batch_size=0)


def test_zero_init_residual_makes_blocks_identities():
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    plain = run(model("resnet110"), {"input": x})["output"]
    zero = run(model("resnet110", zero_init_residual=True), {"input": x})["output"]
    assert np.abs(plain).max() > 1e3 > 10 > np.abs(zero).max()


def test_float64_models_equal_float32_ones_in_higher_precision():
    from onnx.reference import ReferenceEvaluator
    single = create_model("lenet", batch_size=2, input_shape=(1, 8, 8))
    double = create_model("lenet", batch_size=2, input_shape=(1, 8, 8), dtype="float64")
    onnx.checker.check_model(double, full_check=True)
    assert double.graph.input[0].type.tensor_type.elem_type == TensorProto.DOUBLE
    for key, value in initializers(double).items():
        assert value.dtype == np.float64
        np.testing.assert_array_equal(value.astype(np.float32), initializers(single)[key])
    x = np.random.default_rng(0).standard_normal((2, 1, 8, 8))
    y64 = ReferenceEvaluator(double).run(None, {"input": x})[0]
    y32 = run(single, {"input": x.astype(np.float32)})["output"]
    assert y64.dtype == np.float64
    np.testing.assert_allclose(y64, y32, rtol=1e-4, atol=1e-5)
    mlp64 = create_model("mlp", batch_size=2, dtype="float64", loss="softmax_cross_entropy")
    out = run(mlp64, {"input": x.repeat(4, axis=2).repeat(4, axis=3)[:, :, :28, :28],
                      "labels": np.array([1, 2])})
    assert out["loss"].dtype == np.float64 and out["loss"].shape == ()


# -- losses ----------------------------------------------------------------------------
def _log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _probability_model(batch="N", classes=5) -> onnx.ModelProto:
    """input → Softmax → output: a model whose output holds probabilities."""
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["input"], ["output"], name="softmax", axis=1)],
        "probabilities",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, classes])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, classes])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=8)


def test_softmax_cross_entropy_matches_numpy():
    proto = create_model("mlp", batch_size="N", loss="softmax_cross_entropy")
    onnx.checker.check_model(proto, full_check=True)
    labels = [i for i in proto.graph.input if i.name == "labels"][0].type.tensor_type
    assert labels.elem_type == TensorProto.INT64
    assert [d.dim_param or d.dim_value for d in labels.shape.dim] == ["N"]
    assert [o.name for o in proto.graph.output] == ["output", "loss"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 6)
    out = run(proto, {"input": x, "labels": y})
    expected = -_log_softmax(out["output"].astype(np.float64))[np.arange(6), y].mean()
    assert out["loss"].shape == ()
    np.testing.assert_allclose(out["loss"], expected, rtol=1e-5)
    parsed = load_and_parse_model(proto)
    assert [v.name for v in parsed.feed_inputs] == ["input", "labels"]


def test_cross_entropy_matches_numpy():
    proto = add_loss(_probability_model(), "cross_entropy")
    onnx.checker.check_model(proto, full_check=True)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.integers(0, 5, 4)
    out = run(proto, {"input": x, "labels": y})
    expected = -np.log(out["output"][np.arange(4), y]).mean()
    np.testing.assert_allclose(out["loss"], expected, rtol=1e-5)


def test_mean_squared_error_matches_numpy():
    proto = create_model("lenet", batch_size=3, input_shape=(1, 8, 8),
                         loss="mean_squared_error")
    onnx.checker.check_model(proto, full_check=True)
    target = [i for i in proto.graph.input if i.name == "labels"][0].type.tensor_type
    assert target.elem_type == TensorProto.FLOAT
    assert [d.dim_value for d in target.shape.dim] == [3, 10]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 1, 8, 8)).astype(np.float32)
    t = rng.standard_normal((3, 10)).astype(np.float32)
    out = run(proto, {"input": x, "labels": t})
    assert out["loss"].shape == ()
    np.testing.assert_allclose(out["loss"], ((out["output"] - t) ** 2).mean(), rtol=1e-5)


def test_loss_on_intermediate_tensor_and_custom_names():
    proto = add_loss(create_model("mlp", batch_size=2), "softmax_cross_entropy",
                     output="fc1", label="y", loss_name="objective")
    onnx.checker.check_model(proto, full_check=True)
    x = np.ones((2, 1, 28, 28), np.float32)
    out = run(proto, {"input": x, "y": np.array([0, 127])})
    assert set(out) == {"output", "objective"} and out["objective"].shape == ()


def test_add_loss_returns_a_new_model():
    original = create_model("mlp", batch_size=2)
    before = original.SerializeToString()
    add_loss(original, "mean_squared_error")
    assert original.SerializeToString() == before


def test_loss_errors():
    base = create_model("mlp", batch_size=2)
    assert sorted(LOSSES) == ["cross_entropy", "mean_squared_error", "softmax_cross_entropy"]
    with pytest.raises(Deep500Error, match="unknown loss 'hinge'"):
        add_loss(base, "hinge")
    with pytest.raises(Deep500Error, match="no tensor 'logits'"):
        add_loss(base, "softmax_cross_entropy", output="logits")
    with pytest.raises(Deep500Error, match="no tensor 'fc1.weight'"):
        add_loss(base, "softmax_cross_entropy", output="fc1.weight")
    with pytest.raises(Deep500Error, match="already a tensor"):
        add_loss(base, "softmax_cross_entropy", label="input")
    with pytest.raises(Deep500Error, match="already a tensor"):
        add_loss(base, "softmax_cross_entropy", loss_name="output")
    with_loss = add_loss(base, "mean_squared_error")
    with pytest.raises(Deep500Error, match="say which one"):
        add_loss(with_loss, "mean_squared_error", label="t2", loss_name="l2")
    with pytest.raises(Deep500Error, match="unknown loss"):
        create_model("mlp", loss="nope")
    old = _probability_model()
    old.opset_import[0].version = 11
    with pytest.raises(UnsupportedError, match="opset 11"):
        add_loss(old, "cross_entropy")
