"""The zoo's AlexNet and VGG-11 (torchvision layouts adapted to 32×32): valid ONNX,
reproducible, exactly as large as torchvision's models less the documented changes,
running in onnxruntime, and every executor agreeing with it (and with the reference's
gradients)."""
import functools
import importlib

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
import pytest

import deep500 as d5
from deep500.networks import OPSET, create_model, parameter_count
from deep500.utils.errors import ShapeError, UnsupportedError

ort = pytest.importorskip("onnxruntime")

CNN_MODELS = ("alexnet", "vgg11")
TRAINING_EXECUTORS = ("reference", "pytorch", "tensorflow")
OUTPUT_RTOL = 1e-4       # float32 networks, different summation orders: relative L2
GRADIENT_RTOL = 1e-4
# (executor, model) pairs whose operators the executor lacks (none: Conv, Relu, MaxPool,
# Flatten and Gemm run everywhere); strict xfail marks as in test_zoo_sequence_models.
MISSING: dict = {}
BATCH = 2
SMALL_HEAD = {"hidden": 64}          # the agreement tests need not 4,096-wide layers


@functools.lru_cache(maxsize=None)
def _default(name) -> bytes:
    return create_model(name, batch_size=BATCH).SerializeToString()


def default(name) -> onnx.ModelProto:
    return onnx.load_from_string(_default(name))


def images(shape=(3, 32, 32), batch=BATCH, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, *shape)).astype(np.float32)


def run(proto, feeds) -> dict:
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def relative_l2(got, want):
    want = np.asarray(want, np.float64)
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) /
                 max(np.linalg.norm(want), 1e-30))


def pairs():
    for executor in TRAINING_EXECUTORS:
        for model in CNN_MODELS:
            marks = []
            if (executor, model) in MISSING:
                marks = [pytest.mark.xfail(raises=UnsupportedError, strict=True,
                                           reason=f"{executor} lacks {MISSING[executor, model]}")]
            yield pytest.param(executor, model, marks=marks, id=f"{executor}-{model}")


@pytest.mark.parametrize("name", CNN_MODELS)
def test_valid_onnx_that_runs(name):
    proto = default(name)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.opset_import[0].version == OPSET
    inferred = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    assert [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim] == \
        [BATCH, 10]
    y = run(proto, {"input": images()})["output"]
    assert y.shape == (BATCH, 10) and np.all(np.isfinite(y))
    assert {n.op_type for n in proto.graph.node} == {"Conv", "Relu", "MaxPool", "Flatten",
                                                     "Gemm"}


# torchvision's counts (alexnet 61,100,840; vgg11 132,863,336 at 1000 classes) less the
# documented changes, each computed by hand:
ALEXNET_CONV1 = (11 * 11 * 3 * 64 + 64) - (3 * 3 * 3 * 64 + 64)       # 11×11/4 → 3×3/1
ALEXNET_FC1 = (256 * 6 * 6 * 4096 + 4096) - (256 * 3 * 3 * 4096 + 4096)  # 6×6 → 3×3 maps
VGG_FC1 = (512 * 7 * 7 * 4096 + 4096) - (512 * 1 * 1 * 4096 + 4096)     # 7×7 → 1×1 maps
HEAD_10 = (4096 * 1000 + 1000) - (4096 * 10 + 10)                      # 10 classes


@pytest.mark.parametrize("name, expected", [
    ("alexnet", 61_100_840 - ALEXNET_CONV1 - ALEXNET_FC1 - HEAD_10),
    ("vgg11", 132_863_336 - VGG_FC1 - HEAD_10),
])
def test_parameter_counts_are_torchvisions_less_the_adaptation(name, expected):
    assert parameter_count(default(name)) == expected


@pytest.mark.parametrize("name, options, flat", [
    ("alexnet", {}, 256 * 3 * 3),
    ("alexnet", {"input_shape": (3, 64, 64)}, 256 * 7 * 7),       # 64 → 31 → 15 → 7
    ("alexnet", {"input_shape": (1, 16, 16)}, 256 * 1 * 1),       # 16 → 7 → 3 → 1
    ("vgg11", {}, 512),
    ("vgg11", {"input_shape": (3, 64, 48)}, 512 * 2 * 1),
])
def test_input_shape_sets_the_first_classifier_layer(name, options, flat):
    proto = create_model(name, batch_size=1, hidden=16, **options)
    fc1 = [t for t in proto.graph.initializer if t.name == "fc1.weight"][0]
    assert list(fc1.dims) == [16, flat]
    shape = options.get("input_shape", (3, 32, 32))
    assert run(proto, {"input": images(shape, batch=1)})["output"].shape == (1, 10)


@pytest.mark.parametrize("name, shape", [("alexnet", (3, 8, 8)), ("vgg11", (3, 16, 16))])
def test_too_small_inputs_are_refused(name, shape):
    with pytest.raises(ShapeError, match="too small"):
        create_model(name, input_shape=shape)


@pytest.mark.parametrize("name", CNN_MODELS)
def test_same_arguments_give_identical_bytes(name):
    assert create_model(name, seed=2, **SMALL_HEAD).SerializeToString() == \
        create_model(name, seed=2, **SMALL_HEAD).SerializeToString()
    one = {t.name: onnx.numpy_helper.to_array(t)
           for t in create_model(name, seed=0, **SMALL_HEAD).graph.initializer}
    other = {t.name: onnx.numpy_helper.to_array(t)
             for t in create_model(name, seed=1, **SMALL_HEAD).graph.initializer}
    for key, value in one.items():
        # convolution biases start at 0; every other tensor is drawn
        zero_bias = key.startswith("conv") and key.endswith(".bias")
        assert np.array_equal(value, other[key]) == zero_bias, key


def executor(name, model):
    return importlib.import_module(f"deep500.frameworks.{name}").from_onnx(model)


@pytest.mark.parametrize("executor_name, name", list(pairs()))
def test_inference_agrees_with_onnxruntime(executor_name, name):
    proto = create_model(name, batch_size=BATCH, **SMALL_HEAD)
    x = images()
    expected = run(proto, {"input": x})["output"]
    got = executor(executor_name, proto).inference({"input": x})["output"]
    assert relative_l2(got, expected) <= OUTPUT_RTOL


@pytest.mark.parametrize("executor_name, name", list(pairs()))
def test_gradients_agree_with_the_reference(executor_name, name):
    proto = create_model(name, batch_size=BATCH, loss="softmax_cross_entropy", **SMALL_HEAD)
    feeds = {"input": images(), "labels": np.array([3, 7])}
    candidate = executor(executor_name, proto)
    got = candidate.inference_and_backprop(feeds, "loss")
    assert relative_l2(got["loss"], run(proto, feeds)["loss"]) <= OUTPUT_RTOL
    reference = executor("reference", proto)
    expected = reference.inference_and_backprop(feeds, "loss")
    params = reference.network.get_params()
    assert sorted(candidate.network.get_params()) == sorted(params)
    for param in params:
        grad = d5.gradient_name(param)
        assert relative_l2(got[grad], expected[grad]) <= GRADIENT_RTOL, param
