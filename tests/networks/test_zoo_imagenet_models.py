"""The zoo's ImageNet models of the papers: VGG-16 (Simonyan & Zisserman 2015,
configuration D), ResNet-50 and ResNet-101 (He et al. 2016, bottleneck blocks
[3, 4, 6, 3] and [3, 4, 23, 3]) and DenseNet-121 (Huang et al. 2017, growth 32, blocks
[6, 12, 24, 16], bottleneck and compression 0.5).

At full size (224×224, 1000 classes) they are built, checked and counted, not run:
their parameter counts equal the published ones (torchvision's, which the papers'
"138M", "25.6M", "44.5M" and "8.0M" round), derived here a second time from the papers'
tables alone, and the ResNets' multiply-adds are He et al.'s Table 1 figures. At small
sizes (32×32 inputs, a fraction of the width) the same graphs run in the reference
executor and agree with onnxruntime. With torchvision installed, the graphs also
compute what torchvision's models compute, weight for weight.
"""
import functools
import importlib
import math

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
import pytest

import deep500 as d5
from deep500.lv0_operators.cost_model import network_costs
from deep500.networks import create_model, model_names, parameter_count
from deep500.recipe.experiments.networks import parse_network
from deep500.utils.errors import Deep500Error, ShapeError

ort = pytest.importorskip("onnxruntime")

MODELS = ("vgg16", "resnet50", "resnet101", "densenet121")
# Published parameter counts at 224×224 and 1000 classes (torchvision's model cards;
# the papers round them: VGG-16 "138M", DenseNet-121 "8.0M").
PUBLISHED = {"vgg16": 138_357_544, "resnet50": 25_557_032, "resnet101": 44_549_160,
             "densenet121": 7_978_856}
SLOW = {"vgg16", "resnet101"}         # 4-5 s to build at full size on 2 cores
BATCH = 2
# The same graphs at test speed: 32×32 inputs, an eighth of the width (VGG-16, the
# ResNets) or growth 4 instead of 32 (DenseNet-121), 10 classes.
SMALL = {"vgg16": {"width": 0.125, "hidden": 32}, "resnet50": {"width": 0.125},
         "resnet101": {"width": 0.125}, "densenet121": {"growth": 4}}
OUTPUT_RTOL = 1e-4        # float32 networks, different summation orders: relative L2
GRADIENT_RTOL = 1e-4


def _params(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


@functools.lru_cache(maxsize=None)
def _full(name, **options) -> onnx.ModelProto:
    """The full-size model (cached: tests read it, never change it)."""
    return create_model(name, batch_size=1, **options)


def small(name, **options) -> onnx.ModelProto:
    return create_model(name, batch_size=BATCH, input_shape=(3, 32, 32), classes=10,
                        **{**SMALL[name], **options})


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


# -- the papers' counts, derived from their tables alone ---------------------------------
def vgg16_count(classes=1000, size=224):
    """Table 1, column D: thirteen 3×3 convolutions with biases, three FC layers."""
    widths = (64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512)
    convs = sum(c_in * 9 * c_out + c_out for c_in, c_out in zip((3,) + widths, widths))
    flat = 512 * (size // 32) ** 2
    return convs + (flat * 4096 + 4096) + (4096 * 4096 + 4096) + (4096 * classes + classes)


def resnet_count(counts, classes=1000):
    """Table 1's bottleneck stages; a convolution has no bias, its BN a scale and a
    shift per channel; the first block of a stage has a 1×1 projection shortcut (B)."""
    total = 7 * 7 * 3 * 64 + 2 * 64
    c_in = 64
    for width, blocks in zip((64, 128, 256, 512), counts):
        for block in range(blocks):
            total += c_in * width + width * 9 * width + width * 4 * width
            total += 2 * (width + width + 4 * width)
            if block == 0:
                total += c_in * 4 * width + 2 * 4 * width
            c_in = 4 * width
    return total + c_in * classes + classes


def densenet_count(blocks=(6, 12, 24, 16), growth=32, classes=1000):
    """Sec. 3 and Table 1: 2k-filter stem, BN-ReLU-Conv1×1(4k)-BN-ReLU-Conv3×3(k) layers,
    transitions BN-ReLU-Conv1×1 to half the maps, final BN, FC."""
    channels = 2 * growth
    total = 7 * 7 * 3 * channels + 2 * channels
    for index, layers in enumerate(blocks):
        for _ in range(layers):
            total += 2 * channels + channels * 4 * growth + 2 * 4 * growth \
                + 4 * growth * 9 * growth
            channels += growth
        if index < len(blocks) - 1:
            total += 2 * channels + channels * (channels // 2)
            channels //= 2
    return total + 2 * channels + channels * classes + classes


DERIVED = {"vgg16": vgg16_count, "resnet50": lambda: resnet_count((3, 4, 6, 3)),
           "resnet101": lambda: resnet_count((3, 4, 23, 3)), "densenet121": densenet_count}


@pytest.mark.parametrize("name", MODELS)
def test_derivation_from_the_papers_gives_the_published_counts(name):
    assert DERIVED[name]() == PUBLISHED[name]


@pytest.mark.parametrize("name", _params(MODELS))
def test_full_size_models_check_and_count_as_published(name):
    proto = _full(name)
    onnx.checker.check_model(proto)
    assert [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim] == \
        [1, 3, 224, 224]
    assert [d.dim_value for d in proto.graph.output[0].type.tensor_type.shape.dim] == \
        [1, 1000]
    assert parameter_count(proto) == PUBLISHED[name]


def _weighted_layers(proto, shortcuts=False):
    """Convolutions and FC layers, the papers' depth (ResNets leave the projection
    shortcuts out of it)."""
    return sum(1 for n in proto.graph.node if n.op_type in ("Conv", "Gemm")
               and (shortcuts or ".downsample" not in n.name))


@pytest.mark.parametrize("name, depth", [("vgg16", 16), ("resnet50", 50),
                                         ("resnet101", 101), ("densenet121", 121)])
def test_depth_is_the_name(name, depth):
    assert _weighted_layers(small(name)) == depth


def test_densenet121_wiring():
    """58 dense layers, each concatenating its k maps; three transitions with 2×2
    average pooling halving the maps; 1024 maps (at k = 32) reach the classifier."""
    proto = small("densenet121", growth=32)
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("Concat") == 6 + 12 + 24 + 16 and ops.count("AveragePool") == 3
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in inferred.graph.value_info}
    assert shapes["denseblock1.layer6.concat"] == [BATCH, 64 + 6 * 32, 8, 8]
    assert shapes["transition1.pool"] == [BATCH, 128, 4, 4]
    assert shapes["transition3.pool"] == [BATCH, 512, 1, 1]
    assert shapes["denseblock4.layer16.concat"] == [BATCH, 1024, 1, 1]
    fc = [t for t in proto.graph.initializer if t.name == "fc.weight"][0]
    assert list(fc.dims) == [10, 1024]


def _strides(proto, node):
    conv = next(n for n in proto.graph.node if n.name == node)
    return list(next(a for a in conv.attribute if a.name == "strides").ints)


@pytest.mark.parametrize("name", ["resnet50", "resnet101"])
def test_resnets_downsample_where_the_paper_does(name):
    """He et al.: the first 1×1 convolution of conv3_1, conv4_1 and conv5_1 has stride 2;
    with stride_in_3x3 (torchvision, "v1.5") the 3×3 one has. Same parameters."""
    paper, torchvision = small(name), small(name, stride_in_3x3=True)
    for stage in (2, 3, 4):
        block = f"layer{stage}.0"
        assert _strides(paper, f"{block}.conv1.conv") == [2, 2]
        assert _strides(paper, f"{block}.conv2.conv") == [1, 1]
        assert _strides(torchvision, f"{block}.conv1.conv") == [1, 1]
        assert _strides(torchvision, f"{block}.conv2.conv") == [2, 2]
    assert parameter_count(paper) == parameter_count(torchvision)


def _multiply_adds(proto) -> int:
    return sum(math.prod(c.gemm) for c in network_costs(proto)
               if c.op_type in ("Conv", "Gemm"))


@pytest.mark.parametrize("name, table_1", [
    ("resnet50", 3.8e9), pytest.param("resnet101", 7.6e9, marks=pytest.mark.slow)])
def test_resnet_multiply_adds_are_table_1s(name, table_1):
    """He et al. 2016, Table 1 ("FLOPs", counted as multiply-adds) at 224×224; the
    stride in the 3×3 convolution costs 6% (ResNet-50) more, off the table."""
    assert _multiply_adds(_full(name)) == pytest.approx(table_1, rel=0.02)
    if name == "resnet50":
        assert _multiply_adds(_full(name, stride_in_3x3=True)) > 1.06 * table_1


@pytest.mark.parametrize("name", MODELS)
def test_small_models_run_in_the_reference_executor(name):
    proto = small(name)
    onnx.checker.check_model(proto, full_check=True)
    x = images()
    reference = importlib.import_module("deep500.frameworks.reference").from_onnx(proto)
    y = reference.inference({"input": x})["output"]
    assert y.shape == (BATCH, 10) and np.all(np.isfinite(y))
    assert relative_l2(y, run(proto, {"input": x})["output"]) <= OUTPUT_RTOL


@pytest.mark.parametrize("name", ["vgg16", "densenet121"])
def test_too_small_inputs_are_refused(name):
    """Five 2×2 pools (VGG-16), or a /4 stem and three transitions (DenseNet), need 32
    pixels. (The ResNets take any size: strided 1×1 convolutions and global pooling
    never leave less than 1×1.)"""
    with pytest.raises(ShapeError, match="too small"):
        create_model(name, input_shape=(3, 16, 16), **SMALL[name])


def test_names_options_and_errors():
    assert set(MODELS) <= set(model_names())
    assert parse_network({"model": "densenet121", "growth": 8}, "network", ".").options \
        == (("growth", 8),)
    assert parse_network("vgg16", "network", ".").model == "vgg16"
    with pytest.raises(Deep500Error, match="width must be positive"):
        create_model("vgg16", width=0)
    with pytest.raises(Deep500Error, match="width must be positive"):
        create_model("resnet50", width=-1)
    with pytest.raises(Deep500Error, match="18, 34, 50, 101"):
        create_model("resnet50", depth=152)
    with pytest.raises(Deep500Error, match="blocks must be positive"):
        create_model("densenet121", blocks=(6, 0))
    with pytest.raises(Deep500Error, match="compression"):
        create_model("densenet121", compression=0)
    with pytest.raises(Deep500Error, match="does not take the options \\['depth'\\]"):
        create_model("vgg16", depth=19)


@pytest.mark.parametrize("name", MODELS)
def test_same_arguments_give_identical_bytes(name):
    assert small(name, seed=3).SerializeToString() == small(name, seed=3).SerializeToString()
    assert small(name, seed=3).SerializeToString() != small(name, seed=4).SerializeToString()


def test_deep500_predict_takes_a_full_size_model_by_name(tmp_path, capsys):
    """A training recipe naming ``densenet121`` (Concat and AveragePool priced by the
    cost model) on 3×224×224 synthetic data with 1000 classes: analytic curves."""
    import json

    import yaml

    from deep500.cli import main
    recipe = {"name": "imagenet", "experiment": "training",
              "fixed": {"dataset": {"name": "synthetic", "shape": [3, 224, 224],
                                    "classes": 1000},
                        "network": {"model": "densenet121"}, "executor": "reference",
                        "optimizer": {"type": "sgd", "learning_rate": 0.001},
                        "batch_size": 32, "epochs": 1, "loss": "softmax_cross_entropy",
                        "threads": 1, "seed": 0}}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "curves.json"
    assert main(["predict", str(path), "--machine", "infiniband-hdr", "--compute",
                 "analytic", "--ranks", "1,2", "--plot", "none", "--json", str(out)]) == 0
    (workload,) = json.loads(out.read_text())["workloads"]
    assert workload["label"].startswith("densenet121")
    weak = workload["weak"]
    assert weak[0]["gradient_bytes"] == 4 * PUBLISHED["densenet121"]
    assert weak[0]["step_s"] > 0 and weak[1]["exposed_communication_s"] > 0
    assert "## densenet121" in capsys.readouterr().out


# -- torchvision, where it is installed ----------------------------------------------------
def _torch_tensors(module, torch):
    """Parameters and BN statistics in the order torchvision registers its layers,
    which is the order the zoo builds them."""
    tensors = []
    for layer in module.modules():
        if isinstance(layer, torch.nn.Conv2d):
            tensors += [layer.weight] + ([layer.bias] if layer.bias is not None else [])
        elif isinstance(layer, torch.nn.BatchNorm2d):
            tensors += [layer.weight, layer.bias, layer.running_mean, layer.running_var]
        elif isinstance(layer, torch.nn.Linear):
            tensors += [layer.weight, layer.bias]
    return tensors


def _with_torch_weights(proto, module, torch) -> onnx.ModelProto:
    layered = [i for n in proto.graph.node if n.op_type in ("Conv", "BatchNormalization",
                                                           "Gemm") for i in n.input[1:]]
    tensors = _torch_tensors(module, torch)
    assert len(layered) == len(tensors)
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    index = {t.name: t for t in copy.graph.initializer}
    for name, tensor in zip(layered, tensors):
        value = tensor.detach().numpy().astype(np.float32)
        if name == "fc1.weight" and value.shape[1] == 49 * index[name].dims[1]:
            # VGG on 1×1 maps: torchvision's 7×7 adaptive pool repeats each channel 49
            # times (flattened channel-major), so its fc1 acts as the sum of its columns.
            value = value.reshape(value.shape[0], -1, 49).sum(axis=2)
        assert tuple(index[name].dims) == value.shape, name
        index[name].CopyFrom(onnx.numpy_helper.from_array(value, name))
    return copy


TORCHVISION = [("resnet50", {}, "resnet50"), ("resnet50", {"stride_in_3x3": True}, "resnet50"),
               ("resnet101", {}, "resnet101"), ("densenet121", {}, "densenet121"),
               ("vgg16", {}, "vgg16")]


@pytest.mark.slow
@pytest.mark.parametrize("name, options, torchvision_name", TORCHVISION)
def test_torchvision_computes_the_same(name, options, torchvision_name):
    """torchvision's model with random weights and BN statistics, copied into the zoo's
    graph, gives the same logits (64×64 inputs, 32×32 for VGG-16; the parameter counts
    are compared at 224×224). torchvision's ResNets are v1.5; moving the stride of each
    downsampling bottleneck to its first 1×1 convolution makes them the paper's."""
    torch = pytest.importorskip("torch")
    models = pytest.importorskip("torchvision.models")
    torch.manual_seed(0)
    module = getattr(models, torchvision_name)(weights=None).eval()
    for layer in module.modules():
        if isinstance(layer, torch.nn.BatchNorm2d):
            with torch.no_grad():
                layer.weight.uniform_(0.5, 1.5)
                layer.bias.uniform_(-0.2, 0.2)
                layer.running_mean.uniform_(-0.2, 0.2)
                layer.running_var.uniform_(0.5, 2.0)
        if name.startswith("resnet") and not options and hasattr(layer, "conv3") \
                and layer.conv2.stride == (2, 2):
            layer.conv1.stride, layer.conv2.stride = (2, 2), (1, 1)
    size = 32 if name == "vgg16" else 64
    proto = create_model(name, batch_size=1, input_shape=(3, size, size), **options)
    proto = _with_torch_weights(proto, module, torch)
    x = images((3, size, size), batch=1)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    assert relative_l2(run(proto, {"input": x})["output"], expected) <= OUTPUT_RTOL
    assert sum(p.numel() for p in module.parameters()) == PUBLISHED[name]


# -- every training executor -------------------------------------------------------------
EXECUTORS = ("pytorch", "tensorflow")


def executor(name, model):
    return importlib.import_module(f"deep500.frameworks.{name}").from_onnx(model)


@pytest.mark.slow
@pytest.mark.parametrize("executor_name", EXECUTORS)
@pytest.mark.parametrize("name", ["resnet50", "densenet121"])
def test_executors_agree_on_outputs_and_gradients(executor_name, name):
    """The ResNet's strided 1×1 convolutions and DenseNet's Concat and AveragePool in
    PyTorch and TensorFlow: outputs as onnxruntime's, gradients as the reference's."""
    proto = small(name, loss="softmax_cross_entropy",
                  **({"zero_init_residual": True} if name == "resnet50" else {}))
    feeds = {"input": images(), "labels": np.array([3, 7])}
    candidate = executor(executor_name, proto)
    got = candidate.inference_and_backprop(feeds, "loss")
    want = run(proto, feeds)
    assert relative_l2(got["output"], want["output"]) <= OUTPUT_RTOL
    reference = executor("reference", proto)
    expected = reference.inference_and_backprop(feeds, "loss")
    params = reference.network.get_params()
    assert sorted(candidate.network.get_params()) == sorted(params)
    for param in params:
        grad = d5.gradient_name(param)
        assert relative_l2(got[grad], expected[grad]) <= GRADIENT_RTOL, param
