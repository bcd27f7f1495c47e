"""The PyTorch graph executor (d5pt.from_onnx) and the native-module executor: every
mapped ONNX operator against onnxruntime (inputs declared with static and with symbolic
shapes, so both the folded and the runtime paths run), gradients against finite
differences and hand-written PyTorch in float64, a torch.onnx export against its own
module, per-operator events, torch.compile, the Network API and the errors."""
from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import deep500.frameworks.pytorch as d5pt  # noqa: E402
from deep500.frameworks.families import FAMILIES  # noqa: E402
from deep500.frameworks.pytorch.visitor import SUPPORTED_OPERATORS  # noqa: E402
from deep500.lv1_network import ExecutorEvent, gradient_name  # noqa: E402
from deep500.utils.errors import Deep500Error, UnsupportedError  # noqa: E402
from deep500.utils.onnx_interop import operators  # noqa: E402

F = torch.nn.functional
RTOL, ATOL = 1e-5, 1e-6  # float32, executor vs onnxruntime

# torch.compile's import of its own backends warns about PyTorch's deprecated APIs.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:torch.*")


@pytest.fixture(autouse=True, scope="module")
def single_torch_thread():
    """Tiny tensors: with several OpenMP threads PyTorch spends more time handing out
    work than computing (and finite differences run many forwards)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# -- building models --------------------------------------------------------------------
def make_model(nodes, feeds: dict, initializers: dict | None = None, outputs=None,
               opset: int = 17, symbolic: bool = False, name: str = "test_graph"):
    """An ONNX model of ``nodes``; inputs typed from ``feeds`` (static shapes, or every
    dimension symbolic), outputs (default: the last node's) typed by shape inference."""
    initializers = initializers or {}

    def value_info(n, array):
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        shape = [f"{n}_{i}" for i in range(array.ndim)] if symbolic else list(array.shape)
        return helper.make_tensor_value_info(n, elem, shape)

    inputs = [value_info(n, a) for n, a in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers.items()]
    outputs = list(outputs or [o for o in nodes[-1].output if o])
    opsets = [helper.make_opsetid("", opset)]
    probe = helper.make_model(helper.make_graph(nodes, name, inputs, [], inits),
                              opset_imports=opsets, ir_version=9)
    inferred = onnx.shape_inference.infer_shapes(probe)
    known = {v.name: v for v in list(inferred.graph.value_info) + inputs}
    declared = []
    for n in outputs:
        if n in known:
            declared.append(known[n])
        else:  # an initializer, or a type inference cannot tell
            array = initializers.get(n)
            elem = helper.np_dtype_to_tensor_dtype(array.dtype) if array is not None \
                else TensorProto.FLOAT
            declared.append(helper.make_tensor_value_info(n, elem, None))
    for v in declared:  # the checker wants a shape field, even an unknown one
        v.type.tensor_type.shape.SetInParent()
    graph = helper.make_graph(nodes, name, inputs, declared, inits)
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def run_ort(model, feeds: dict) -> dict:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def node(op_type, inputs, outputs, **attributes):
    return helper.make_node(op_type, inputs, outputs, **attributes)


def i64(*values):
    return np.array(values, np.int64)


# -- one or a few operators against onnxruntime -------------------------------------------
def _cases():
    """name -> function(rng) returning (nodes, feeds, initializers, opset)."""
    c = {}

    def case(name):
        def register(fn):
            c[name] = fn
            return fn
        return register

    def conv(name, x_shape, w_shape, bias=True, **attrs):
        @case(name)
        def build(rng):
            inits = {"W": rand(rng, *w_shape)}
            if bias:
                inits["B"] = rand(rng, w_shape[0])
            return ([node("Conv", ["x", "W"] + (["B"] if bias else []), ["y"], **attrs)],
                    {"x": rand(rng, *x_shape)}, inits, 17)

    conv("conv2d", (2, 3, 7, 6), (4, 3, 3, 3), pads=[1, 1, 1, 1])
    conv("conv2d_stride_dilation_group", (1, 4, 9, 8), (6, 2, 3, 2), strides=[2, 1],
         dilations=[1, 2], group=2, pads=[1, 0, 1, 0])
    conv("conv2d_asymmetric_pads", (1, 2, 6, 5), (3, 2, 3, 3), pads=[0, 1, 2, 0],
         strides=[2, 2])
    conv("conv2d_no_bias", (2, 2, 5, 5), (3, 2, 2, 2), bias=False)
    conv("conv1d", (2, 3, 10), (4, 3, 3), pads=[2, 1], strides=[2])
    conv("conv2d_same_upper", (1, 2, 7, 6), (3, 2, 3, 2), auto_pad="SAME_UPPER",
         strides=[2, 2])
    conv("conv2d_same_lower", (1, 2, 7, 6), (3, 2, 4, 3), auto_pad="SAME_LOWER",
         strides=[2, 1])
    conv("conv2d_valid", (1, 2, 7, 6), (3, 2, 3, 3), auto_pad="VALID", strides=[2, 2])

    def conv_t(name, x_shape, w_shape, **attrs):
        @case(name)
        def build(rng):
            return ([node("ConvTranspose", ["x", "W", "B"], ["y"], **attrs)],
                    {"x": rand(rng, *x_shape)},
                    {"W": rand(rng, *w_shape), "B": rand(rng, w_shape[1] * attrs.get(
                        "group", 1))}, 17)

    conv_t("convtranspose", (1, 2, 4, 3), (2, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1],
           output_padding=[1, 0])
    conv_t("convtranspose_asymmetric", (1, 2, 4, 4), (2, 2, 3, 3), strides=[2, 1],
           pads=[0, 1, 1, 0])
    conv_t("convtranspose_output_shape", (1, 2, 3, 3), (2, 2, 3, 3), strides=[2, 2],
           output_shape=[6, 6])

    def gemm(name, a_shape, b_shape, c_shape, **attrs):
        @case(name)
        def build(rng):
            inits = {"B": rand(rng, *b_shape)}
            if c_shape is not None:
                inits["C"] = rand(rng, *c_shape)
            return ([node("Gemm", ["a", "B"] + (["C"] if c_shape else []), ["y"], **attrs)],
                    {"a": rand(rng, *a_shape)}, inits, 13)

    gemm("gemm_linear", (3, 4), (5, 4), (5,), transB=1)
    gemm("gemm_plain_no_c", (3, 4), (4, 5), None)
    gemm("gemm_alpha_beta_trans", (4, 3), (5, 4), (3, 5), transA=1, transB=1, alpha=0.5,
         beta=2.0)
    gemm("gemm_row_c", (3, 4), (4, 5), (1, 5), alpha=1.5)

    @case("matmul_batched")
    def _(rng):
        return ([node("MatMul", ["a", "b"], ["y"])],
                {"a": rand(rng, 2, 3, 4), "b": rand(rng, 4, 5)}, {}, 13)

    for op_type in ("Add", "Sub", "Mul", "Div", "Min", "Max", "Equal"):
        @case(f"{op_type.lower()}_broadcast")
        def _(rng, op_type=op_type):
            a, b = rand(rng, 2, 3, 4), rand(rng, 3, 1)
            if op_type == "Equal":
                b = np.round(b)
                a = np.round(a)
            return [node(op_type, ["a", "b"], ["y"])], {"a": a, "b": b}, {}, 13

    @case("div_integers_truncate")
    def _(rng):
        return ([node("Div", ["a", "b"], ["y"])],
                {"a": i64(7, -7, 9, -9), "b": i64(2, 2, -4, -4)}, {}, 13)

    @case("pow_constant_exponent")
    def _(rng):
        return ([node("Pow", ["x", "e"], ["y"])], {"x": np.abs(rand(rng, 3, 4)) + 0.1},
                {"e": np.array(2.5, np.float32)}, 15)

    @case("pow_tensor")
    def _(rng):
        return ([node("Pow", ["x", "e"], ["y"])],
                {"x": np.abs(rand(rng, 3, 4)) + 0.1, "e": rand(rng, 4)}, {}, 15)

    unary = {"Sqrt": "positive", "Exp": None, "Log": "positive", "Neg": None, "Abs": None,
             "Erf": None, "Relu": None, "Sigmoid": None, "Tanh": None, "Reciprocal":
             "positive", "Floor": None, "Ceil": None, "Identity": None}
    for op_type, domain in unary.items():
        @case(op_type.lower())
        def _(rng, op_type=op_type, domain=domain):
            x = rand(rng, 2, 3, 4) * 2
            if domain == "positive":
                x = np.abs(x) + 0.1
            return [node(op_type, ["x"], ["y"])], {"x": x}, {}, 13

    @case("leakyrelu")
    def _(rng):
        return [node("LeakyRelu", ["x"], ["y"], alpha=0.2)], {"x": rand(rng, 3, 5)}, {}, 16

    @case("not_less_greater_where")
    def _(rng):
        return ([node("Less", ["a", "b"], ["lt"]), node("Greater", ["a", "b"], ["gt"]),
                 node("Not", ["lt"], ["ge"]), node("Where", ["ge", "a", "b"], ["y"])],
                {"a": rand(rng, 3, 4), "b": rand(rng, 4)}, {}, 13)

    @case("sum_three")
    def _(rng):
        return ([node("Sum", ["a", "b", "c"], ["y"])],
                {"a": rand(rng, 2, 3), "b": rand(rng, 3), "c": rand(rng, 2, 1)}, {}, 13)

    @case("max_single")
    def _(rng):
        return [node("Max", ["a"], ["y"])], {"a": rand(rng, 2, 3)}, {}, 13

    for op_type in ("Softmax", "LogSoftmax"):
        for opset in (11, 13):
            for axis in (0, 1, -1):
                @case(f"{op_type.lower()}_opset{opset}_axis{axis}")
                def _(rng, op_type=op_type, opset=opset, axis=axis):
                    return ([node(op_type, ["x"], ["y"], axis=axis)],
                            {"x": rand(rng, 2, 3, 4)}, {}, opset)

    @case("clip_opset6")
    def _(rng):
        return [node("Clip", ["x"], ["y"], min=-0.5, max=0.7)], {"x": rand(rng, 3, 4)}, {}, 6

    @case("clip_constant_bounds")
    def _(rng):
        return ([node("Clip", ["x", "lo", ""], ["y"])], {"x": rand(rng, 3, 4)},
                {"lo": np.array(-0.3, np.float32)}, 13)

    @case("clip_runtime_bounds")
    def _(rng):
        return ([node("Clip", ["x", "lo", "hi"], ["y"])],
                {"x": rand(rng, 3, 4), "lo": np.array(-0.3, np.float32),
                 "hi": np.array(0.4, np.float32)}, {}, 13)

    @case("clip_none")
    def _(rng):
        return [node("Clip", ["x"], ["y"])], {"x": rand(rng, 3, 4)}, {}, 13

    def pool(name, op_type, x_shape, opset=17, outputs=("y",), **attrs):
        @case(name)
        def build(rng):
            return ([node(op_type, ["x"], list(outputs), **attrs)],
                    {"x": rand(rng, *x_shape)}, {}, opset)

    pool("maxpool", "MaxPool", (2, 3, 6, 6), kernel_shape=[2, 2], strides=[2, 2])
    pool("maxpool_pads_strides", "MaxPool", (1, 2, 7, 6), kernel_shape=[3, 3],
         strides=[2, 2], pads=[1, 1, 1, 1])
    pool("maxpool_ceil", "MaxPool", (1, 2, 7, 6), kernel_shape=[3, 2], strides=[2, 2],
         ceil_mode=1)
    pool("maxpool_asymmetric", "MaxPool", (1, 2, 6, 6), kernel_shape=[3, 3],
         pads=[0, 1, 2, 1])
    pool("maxpool_dilated", "MaxPool", (1, 2, 8, 8), kernel_shape=[2, 2],
         dilations=[2, 2], opset=12)
    pool("maxpool_same_upper", "MaxPool", (1, 2, 7, 6), kernel_shape=[3, 3],
         strides=[2, 2], auto_pad="SAME_UPPER")
    pool("maxpool_1d", "MaxPool", (2, 3, 9), kernel_shape=[3], strides=[2])
    pool("maxpool_indices", "MaxPool", (2, 3, 6, 5), kernel_shape=[2, 2], strides=[2, 1],
         pads=[1, 0, 1, 0], outputs=("y", "indices"))
    pool("averagepool", "AveragePool", (2, 3, 6, 6), kernel_shape=[2, 2], strides=[2, 2])
    pool("averagepool_pads_exclude", "AveragePool", (1, 2, 7, 6), kernel_shape=[3, 3],
         strides=[2, 2], pads=[1, 1, 1, 1])
    pool("averagepool_pads_include", "AveragePool", (1, 2, 7, 6), kernel_shape=[3, 3],
         strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    pool("averagepool_ceil", "AveragePool", (1, 2, 7, 7), kernel_shape=[2, 2],
         strides=[2, 2], ceil_mode=1)
    pool("averagepool_asymmetric_exclude", "AveragePool", (1, 2, 6, 6),
         kernel_shape=[3, 3], pads=[0, 1, 2, 1], strides=[2, 1])
    pool("averagepool_asymmetric_include", "AveragePool", (1, 2, 6, 6),
         kernel_shape=[3, 3], pads=[0, 1, 2, 1], count_include_pad=1)
    pool("averagepool_same_lower", "AveragePool", (1, 2, 7, 6), kernel_shape=[3, 3],
         strides=[2, 2], auto_pad="SAME_LOWER")
    # Explicitly padded, with a last window that would start in the end padding.
    pool("maxpool_large_pads_ceil", "MaxPool", (1, 2, 6, 6), kernel_shape=[3, 3],
         strides=[2, 2], pads=[1, 2, 1, 2], ceil_mode=1, opset=19)
    pool("averagepool_large_pads_ceil", "AveragePool", (1, 2, 7, 7), kernel_shape=[3, 3],
         strides=[3, 3], pads=[1, 2, 1, 2], ceil_mode=1, count_include_pad=1, opset=19)
    pool("globalaveragepool", "GlobalAveragePool", (2, 3, 4, 5))
    pool("globalmaxpool", "GlobalMaxPool", (2, 3, 4, 5))

    @case("batchnorm_inference")
    def _(rng):
        return ([node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                      epsilon=1e-3)],
                {"x": rand(rng, 2, 3, 4, 5)},
                {"s": rand(rng, 3), "b": rand(rng, 3), "m": rand(rng, 3),
                 "v": np.abs(rand(rng, 3)) + 0.5}, 15)

    @case("batchnorm_computed_statistics")
    def _(rng):
        # Statistics that are not initializers read by BatchNormalization directly stay
        # parameters, and get gradients.
        return ([node("Identity", ["m"], ["mean"]), node("Identity", ["v"], ["var"]),
                 node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"])],
                {"x": rand(rng, 2, 3, 4, 5)},
                {"s": rand(rng, 3), "b": rand(rng, 3), "m": rand(rng, 3),
                 "v": np.abs(rand(rng, 3)) + 1.0}, 15)

    @case("batchnorm_training")
    def _(rng):
        return ([node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                      training_mode=1, momentum=0.8)],
                {"x": rand(rng, 4, 3, 2, 2)},
                {"s": rand(rng, 3), "b": rand(rng, 3), "m": rand(rng, 3),
                 "v": np.abs(rand(rng, 3)) + 0.5}, 15)

    @case("dropout_inference_mask")
    def _(rng):
        return ([node("Dropout", ["x", "r"], ["y", "mask"])], {"x": rand(rng, 3, 4)},
                {"r": np.array(0.3, np.float32)}, 13)

    @case("dropout_opset10")
    def _(rng):
        return [node("Dropout", ["x"], ["y"], ratio=0.2)], {"x": rand(rng, 3, 4)}, {}, 10

    for axis in (0, 1, 2, -1):
        @case(f"flatten_axis{axis}")
        def _(rng, axis=axis):
            return ([node("Flatten", ["x"], ["y"], axis=axis)], {"x": rand(rng, 2, 3, 4)},
                    {}, 13)

    @case("reshape_zero_minus_one")
    def _(rng):
        return ([node("Reshape", ["x", "s"], ["y"])], {"x": rand(rng, 2, 3, 4)},
                {"s": i64(0, -1, 2)}, 13)

    @case("reshape_allowzero")
    def _(rng):
        return ([node("Reshape", ["x", "s"], ["y"], allowzero=1)], {"x": rand(rng, 2, 3, 4)},
                {"s": i64(4, 6)}, 14)

    @case("reshape_runtime_shape")
    def _(rng):
        return ([node("Reshape", ["x", "s"], ["y"])],
                {"x": rand(rng, 2, 3, 4), "s": i64(4, 0, -1)}, {}, 13)

    @case("transpose_default")
    def _(rng):
        return [node("Transpose", ["x"], ["y"])], {"x": rand(rng, 2, 3, 4)}, {}, 13

    @case("transpose_perm")
    def _(rng):
        return ([node("Transpose", ["x"], ["y"], perm=[1, 2, 0])],
                {"x": rand(rng, 2, 3, 4)}, {}, 13)

    @case("concat")
    def _(rng):
        return ([node("Concat", ["a", "b", "c", "d"], ["y"], axis=-2)],
                {"a": rand(rng, 2, 1, 3), "b": rand(rng, 2, 2, 3)},
                {"c": rand(rng, 2, 3, 3), "d": rand(rng, 2, 1, 3)}, 13)

    @case("split_input")
    def _(rng):
        return ([node("Split", ["x", "s"], ["y0", "y1", "y2"], axis=1)],
                {"x": rand(rng, 2, 6)}, {"s": i64(1, 2, 3)}, 13)

    @case("split_attribute")
    def _(rng):
        return ([node("Split", ["x"], ["y0", "y1"], axis=0, split=[1, 3])],
                {"x": rand(rng, 4, 2)}, {}, 11)

    @case("split_num_outputs")
    def _(rng):
        return ([node("Split", ["x"], ["y0", "y1", "y2"], axis=-1, num_outputs=3)],
                {"x": rand(rng, 2, 6)}, {}, 18)

    @case("split_equal")
    def _(rng):
        return [node("Split", ["x"], ["y0", "y1"], axis=1)], {"x": rand(rng, 2, 6)}, {}, 13

    @case("squeeze_opset11")
    def _(rng):
        return ([node("Squeeze", ["x"], ["y"], axes=[0, -1])], {"x": rand(rng, 1, 3, 1)},
                {}, 11)

    @case("squeeze_opset13")
    def _(rng):
        return ([node("Squeeze", ["x", "a"], ["y"])], {"x": rand(rng, 1, 3, 1)},
                {"a": i64(2)}, 13)

    @case("squeeze_all")
    def _(rng):
        return [node("Squeeze", ["x"], ["y"])], {"x": rand(rng, 1, 3, 1, 2)}, {}, 13

    @case("unsqueeze_opset11")
    def _(rng):
        return ([node("Unsqueeze", ["x"], ["y"], axes=[0, -1])], {"x": rand(rng, 3, 2)},
                {}, 11)

    @case("unsqueeze_opset13")
    def _(rng):
        return ([node("Unsqueeze", ["x", "a"], ["y"])], {"x": rand(rng, 3, 2)},
                {"a": i64(-2, 0)}, 13)

    @case("unsqueeze_one_axis")
    def _(rng):
        return ([node("Unsqueeze", ["x", "a"], ["y"])], {"x": rand(rng, 3, 2)},
                {"a": i64(1)}, 13)

    @case("shape")
    def _(rng):
        return [node("Shape", ["x"], ["y"])], {"x": rand(rng, 2, 3, 4)}, {}, 13

    @case("shape_start_end")
    def _(rng):
        return ([node("Shape", ["x"], ["y"], start=1, end=-1)], {"x": rand(rng, 2, 3, 4)},
                {}, 15)

    @case("gather_axis0")
    def _(rng):
        return ([node("Gather", ["x", "i"], ["y"])], {"x": rand(rng, 5, 3)},
                {"i": i64(0, -1, 2, 2)}, 13)

    @case("gather_axis1_2d_indices")
    def _(rng):
        return ([node("Gather", ["x", "i"], ["y"], axis=1)], {"x": rand(rng, 2, 5, 3)},
                {"i": np.array([[0, 4], [-2, 1]], np.int32)}, 13)

    @case("gather_scalar_negative_axis")
    def _(rng):
        return ([node("Gather", ["x", "i"], ["y"], axis=-1)], {"x": rand(rng, 2, 3, 4)},
                {"i": np.array(-1, np.int64)}, 13)

    @case("gather_runtime_indices")
    def _(rng):
        return ([node("Gather", ["x", "i"], ["y"], axis=-2)],
                {"x": rand(rng, 2, 5, 3), "i": i64(4, 0, -1)}, {}, 13)

    @case("slice_axes_steps")
    def _(rng):
        return ([node("Slice", ["x", "s", "e", "a", "t"], ["y"])], {"x": rand(rng, 4, 6, 5)},
                {"s": i64(1, -4), "e": i64(1000, -1), "a": i64(2, 1), "t": i64(2, 1)}, 13)

    @case("slice_negative_steps")
    def _(rng):
        return ([node("Slice", ["x", "s", "e", "a", "t"], ["y"])], {"x": rand(rng, 4, 6)},
                {"s": i64(-1, 4), "e": i64(-1000, 0), "a": i64(1, 0), "t": i64(-2, -1)}, 13)

    @case("slice_opset9")
    def _(rng):
        return ([node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 2])],
                {"x": rand(rng, 4, 3, 5)}, {}, 9)

    @case("slice_runtime")
    def _(rng):
        return ([node("Slice", ["x", "s", "e"], ["y"])],
                {"x": rand(rng, 4, 6), "s": i64(1, 2), "e": i64(3, 100)}, {}, 13)

    @case("cast")
    def _(rng):
        return ([node("Cast", ["x"], ["i"], to=TensorProto.INT64),
                 node("Cast", ["i"], ["y"], to=TensorProto.DOUBLE)],
                {"x": rand(rng, 3, 4) * 5}, {}, 13)

    @case("constant_and_constantofshape")
    def _(rng):
        value = numpy_helper.from_array(np.array([2.5], np.float32), "v")
        return ([node("Constant", [], ["c"], value=numpy_helper.from_array(
                    rand(rng, 4), "c")),
                 node("Constant", [], ["k"], value_ints=[2, 1]),
                 node("ConstantOfShape", ["k"], ["f"], value=value),
                 node("Shape", ["x"], ["sx"]),
                 node("ConstantOfShape", ["sx"], ["g"]),
                 node("Add", ["x", "c"], ["xc"]),
                 node("Add", ["xc", "g"], ["xg"]),
                 node("Mul", ["xg", "f"], ["y"])],
                {"x": rand(rng, 2, 4)}, {}, 13)

    @case("expand")
    def _(rng):
        return ([node("Expand", ["x", "s"], ["y"])], {"x": rand(rng, 3, 1)},
                {"s": i64(2, 1, 4)}, 13)

    @case("expand_runtime")
    def _(rng):
        return ([node("Expand", ["x", "s"], ["y"])], {"x": rand(rng, 3, 1), "s": i64(3, 4)},
                {}, 13)

    for mode in ("constant", "reflect", "edge"):
        @case(f"pad_{mode}")
        def _(rng, mode=mode):
            inits = {"p": i64(0, 0, 1, 2, 0, 0, 2, 1)}
            inputs = ["x", "p"]
            if mode == "constant":
                inits["v"] = np.array(1.5, np.float32)
                inputs.append("v")
            return ([node("Pad", inputs, ["y"], mode=mode)], {"x": rand(rng, 2, 3, 4, 4)},
                    inits, 13)

    @case("pad_axes_opset18")
    def _(rng):
        return ([node("Pad", ["x", "p", "", "a"], ["y"])], {"x": rand(rng, 2, 3, 4)},
                {"p": i64(1, 2, 0, 1), "a": i64(-1, 0)}, 18)

    @case("pad_opset2")
    def _(rng):
        return ([node("Pad", ["x"], ["y"], pads=[0, 1, 0, 2], value=-1.0)],
                {"x": rand(rng, 2, 3)}, {}, 2)

    for op_type in ("ReduceMean", "ReduceSum", "ReduceMax"):
        for keepdims in (0, 1):
            @case(f"{op_type.lower()}_axes_keepdims{keepdims}")
            def _(rng, op_type=op_type, keepdims=keepdims):
                return ([node(op_type, ["x", "a"], ["y"], keepdims=keepdims)],
                        {"x": rand(rng, 2, 3, 4)}, {"a": i64(0, -1)}, 18)

            @case(f"{op_type.lower()}_opset11_attribute_keepdims{keepdims}")
            def _(rng, op_type=op_type, keepdims=keepdims):
                return ([node(op_type, ["x"], ["y"], axes=[1], keepdims=keepdims)],
                        {"x": rand(rng, 2, 3, 4)}, {}, 11)

        @case(f"{op_type.lower()}_all")
        def _(rng, op_type=op_type):
            return [node(op_type, ["x"], ["y"])], {"x": rand(rng, 2, 3, 4)}, {}, 18

    @case("reducesum_noop_empty_axes")
    def _(rng):
        return ([node("ReduceSum", ["x", "a"], ["y"], noop_with_empty_axes=1)],
                {"x": rand(rng, 2, 3)}, {"a": np.zeros(0, np.int64)}, 13)

    @case("range_runtime")
    def _(rng):
        return ([node("Range", ["s", "l", "d"], ["y"])],
                {"s": np.array(1.0, np.float32), "l": np.array(7.5, np.float32),
                 "d": np.array(1.5, np.float32)}, {}, 11)

    @case("range_constant")
    def _(rng):
        return ([node("Range", ["s", "l", "d"], ["r"]), node("Add", ["x", "r"], ["y"])],
                {"x": np.arange(8, dtype=np.int64).reshape(2, 4)},
                {"s": np.array(0, np.int64), "l": np.array(8, np.int64),
                 "d": np.array(2, np.int64)}, 11)

    for reduction in ("mean", "sum", "none"):
        @case(f"softmaxcrossentropyloss_{reduction}")
        def _(rng, reduction=reduction):
            return ([node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"],
                          reduction=reduction)],
                    {"x": rand(rng, 5, 4), "t": i64(0, 3, 1, 1, 2)}, {}, 13)

    @case("softmaxcrossentropyloss_weights_ignore_logprob")
    def _(rng):
        return ([node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["y", "log_prob"],
                      ignore_index=1)],
                {"x": rand(rng, 3, 4, 2), "t": np.array([[0, 1], [3, 2], [1, 1]],
                                                         np.int32)},
                {"w": np.abs(rand(rng, 4)) + 0.1}, 13)

    @case("negativeloglikelihoodloss")
    def _(rng):
        return ([node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"], reduction="sum",
                      ignore_index=2)],
                {"x": rand(rng, 5, 4), "t": i64(0, 3, 2, 1, 2)},
                {"w": np.abs(rand(rng, 4)) + 0.1}, 13)

    return c


CASES = _cases()


def operators_of_cases() -> set:
    """The operators (lower case) that CASES run."""
    used = set()
    for build in CASES.values():
        nodes = build(np.random.default_rng(0))[0]
        used.update(n.op_type.lower() for n in nodes)
    return used


def operators_named_in_other_tests() -> set:
    """The ONNX operators (lower case) that the other PyTorch test files of this folder
    name, as a string spelt exactly as ONNX spells the operator."""
    operators = {op for _, ops in FAMILIES.values() for op in ops}
    named = set()
    for path in pathlib.Path(__file__).parent.glob("test_pytorch_*.py"):
        if path.name == pathlib.Path(__file__).name:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in operators:
                named.add(node.value.lower())
    return named


def test_cases_cover_every_supported_operator():
    # The operators beyond these cases have their own test files
    # (test_pytorch_ops_tensor.py, test_pytorch_ops_sequence.py,
    # test_pytorch_control_flow.py, ...), each checking its families.
    elsewhere = operators_named_in_other_tests()
    assert set(SUPPORTED_OPERATORS) - operators_of_cases() - elsewhere <= {"size"}
    required = """Conv ConvTranspose Gemm MatMul Add Sub Mul Div Pow Sqrt Exp Log Neg Abs Erf
        Relu LeakyRelu Sigmoid Tanh Softmax LogSoftmax Clip MaxPool AveragePool
        GlobalAveragePool GlobalMaxPool BatchNormalization Dropout Flatten Reshape
        Transpose Concat Split Squeeze Unsqueeze Shape Gather Slice Cast Constant
        ConstantOfShape Expand Identity Pad ReduceMean ReduceSum ReduceMax Equal Where
        Range Min Max Sum SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss""".split()
    assert {r.lower() for r in required} <= set(SUPPORTED_OPERATORS)


def assert_outputs_match(got: dict, want: dict, rtol=RTOL, atol=ATOL):
    assert sorted(got) == sorted(want)
    for name in want:
        g, w = np.asarray(got[name]), np.asarray(want[name])
        assert g.shape == w.shape, (name, g.shape, w.shape)
        assert g.dtype == w.dtype, (name, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_operator_matches_onnxruntime(case, symbolic):
    nodes, feeds, inits, opset = CASES[case](np.random.default_rng(len(case)))
    model = make_model(nodes, feeds, inits, opset=opset, symbolic=symbolic, name=case)
    executor = d5pt.from_onnx(model)
    assert_outputs_match(executor.inference(feeds), run_ort(model, feeds))


# -- gradients ---------------------------------------------------------------------------
def with_weighted_sum_loss(nodes, output: str, shape, rng):
    """nodes + loss = ReduceSum(output · R) for a fixed random R (float64)."""
    weights = rng.standard_normal(shape)
    return nodes + [node("Mul", [output, "loss_weights"], ["weighted"]),
                    node("ReduceSum", ["weighted"], ["loss"], keepdims=0)], weights


def finite_difference_gradients(executor, feeds, params, eps=1e-6):
    network = executor.network
    result = {}
    for name in params:
        value = network.fetch_tensor(name)
        grad = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            for sign in (1, -1):
                shifted = value.copy()
                shifted[index] += sign * eps
                network.feed_tensor(name, shifted)
                grad[index] += sign * float(executor.inference(feeds)["loss"])
            grad[index] /= 2 * eps
        network.feed_tensor(name, value)
        result[name] = grad
    return result


GRADIENT_CASES = ["conv2d_asymmetric_pads", "conv2d_same_lower", "convtranspose_asymmetric",
                  "convtranspose", "gemm_alpha_beta_trans", "gemm_linear",
                  "maxpool_pads_strides", "averagepool_asymmetric_exclude",
                  "averagepool_pads_exclude", "batchnorm_inference", "batchnorm_training",
                  "batchnorm_computed_statistics", "softmax_opset11_axis1",
                  "logsoftmax_opset13_axis0", "pad_reflect", "pad_constant",
                  "slice_negative_steps", "gather_axis1_2d_indices", "expand", "concat",
                  "split_input", "pow_constant_exponent", "clip_runtime_bounds",
                  "softmaxcrossentropyloss_weights_ignore_logprob",
                  "negativeloglikelihoodloss", "reducemax_axes_keepdims1"]


def _as_float64_case(case, rng):
    """The case with every float tensor made float64 and a parameter (initializer), so
    finite differences can perturb it; integer inputs stay inputs."""
    nodes, feeds, inits, opset = CASES[case](rng)
    params, fixed, constants = {}, {}, {}
    for source, name, value in ([("feed", n, v) for n, v in feeds.items()]
                                + [("init", n, v) for n, v in inits.items()]):
        value = np.asarray(value)
        if np.issubdtype(value.dtype, np.floating):
            params[name] = value.astype(np.float64)
        elif source == "feed":
            fixed[name] = value
        else:
            constants[name] = value
    return nodes, params, fixed, constants, opset


@pytest.mark.parametrize("case", GRADIENT_CASES)
def test_gradients_match_finite_differences(case):
    rng = np.random.default_rng(len(case))
    nodes, params, fixed, constants, opset = _as_float64_case(case, rng)
    if case == "batchnorm_inference":  # keep variances positive under perturbation
        params["v"] = np.abs(params["v"]) + 1.0
    output = nodes[-1].output[0]
    probe = d5pt.from_onnx(make_model(nodes, fixed, {**params, **constants}, opset=opset))
    shape = probe.inference(fixed)[output].shape
    all_nodes, weights = with_weighted_sum_loss(nodes, output, shape, rng)
    model = make_model(all_nodes, fixed, {**params, **constants, "loss_weights": weights},
                       outputs=["loss"], opset=max(opset, 13))
    executor = d5pt.from_onnx(model)
    result = executor.inference_and_backprop(fixed, "loss")
    trained = [p for p in executor.network.get_params() if p != "loss_weights"]
    numeric = finite_difference_gradients(executor, fixed, trained)
    for name in trained:
        np.testing.assert_allclose(result[gradient_name(name)], numeric[name],
                                   rtol=1e-5, atol=1e-7, err_msg=name)
    assert result[gradient_name("loss_weights")].shape == weights.shape
    if case in ("batchnorm_inference", "batchnorm_training"):
        assert not {"m", "v"} & set(trained)  # running statistics are not parameters
    elif case == "batchnorm_computed_statistics":
        assert {"m", "v"} <= set(trained)


def mlp_model(rng, dtype=np.float32):
    params = {"W1": rand(rng, 8, 4, dtype=dtype), "b1": rand(rng, 8, dtype=dtype),
              "W2": rand(rng, 3, 8, dtype=dtype), "b2": rand(rng, 3, dtype=dtype)}
    nodes = [node("Gemm", ["x", "W1", "b1"], ["h"], transB=1),
             node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "W2", "b2"], ["logits"], transB=1),
             node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"])]
    feeds = {"x": rand(rng, 5, 4, dtype=dtype), "labels": i64(0, 2, 1, 1, 0)}
    model = make_model(nodes, {"x": feeds["x"], "labels": feeds["labels"]}, params,
                       outputs=["logits", "loss"], symbolic=True, name="mlp")
    return model, feeds, params


def test_mlp_inference_and_gradients_match_torch():
    rng = np.random.default_rng(1)
    model, feeds, params = mlp_model(rng, np.float64)
    executor = d5pt.from_onnx(model)
    result = executor.inference_and_backprop(feeds, "loss")
    assert_outputs_match(executor.inference(feeds), run_ort(model, feeds), 1e-12, 1e-12)

    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    logits = F.linear(torch.relu(F.linear(torch.tensor(feeds["x"]), t["W1"], t["b1"])),
                      t["W2"], t["b2"])
    loss = F.cross_entropy(logits, torch.tensor(feeds["labels"]))
    loss.backward()
    np.testing.assert_allclose(result["loss"], loss.item(), rtol=1e-12)
    for name in params:
        np.testing.assert_allclose(result[gradient_name(name)], t[name].grad.numpy(),
                                   rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(executor.network.fetch_tensor(gradient_name(name)),
                                      result[gradient_name(name)])
    assert sorted(executor.network.get_params()) == sorted(params)
    assert executor.network.gradient("loss") == [(p, gradient_name(p))
                                                 for p in executor.network.get_params()]


def cnn_model(rng, dtype=np.float32):
    """Conv → BatchNormalization → Relu → MaxPool → Conv → GlobalAveragePool →
    Flatten → Gemm → SoftmaxCrossEntropyLoss."""
    params = {"c1.w": rand(rng, 4, 2, 3, 3, dtype=dtype), "c1.b": rand(rng, 4, dtype=dtype),
              "bn.s": rand(rng, 4, dtype=dtype), "bn.b": rand(rng, 4, dtype=dtype),
              "bn.m": rand(rng, 4, dtype=dtype),
              "bn.v": (np.abs(rand(rng, 4)) + 0.5).astype(dtype),
              "c2.w": rand(rng, 6, 4, 3, 3, dtype=dtype),
              "fc.w": rand(rng, 3, 6, dtype=dtype), "fc.b": rand(rng, 3, dtype=dtype)}
    nodes = [node("Conv", ["x", "c1.w", "c1.b"], ["c1"], pads=[1, 1, 1, 1]),
             node("BatchNormalization", ["c1", "bn.s", "bn.b", "bn.m", "bn.v"], ["bn"]),
             node("Relu", ["bn"], ["r"]),
             node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Conv", ["p", "c2.w"], ["c2"], strides=[2, 2], pads=[0, 0, 1, 1]),
             node("GlobalAveragePool", ["c2"], ["g"]),
             node("Flatten", ["g"], ["f"]),
             node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1),
             node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"])]
    feeds = {"x": rand(rng, 3, 2, 8, 8, dtype=dtype), "labels": i64(2, 0, 1)}
    model = make_model(nodes, feeds, params, outputs=["logits", "loss"], name="cnn")
    return model, feeds, params


def cnn_torch(t, x, labels):
    c1 = F.conv2d(x, t["c1.w"], t["c1.b"], padding=1)
    bn = (c1 - t["bn.m"].view(1, -1, 1, 1)) / torch.sqrt(t["bn.v"].view(1, -1, 1, 1) + 1e-5) \
        * t["bn.s"].view(1, -1, 1, 1) + t["bn.b"].view(1, -1, 1, 1)
    p = F.max_pool2d(torch.relu(bn), 2)
    c2 = F.conv2d(F.pad(p, [0, 1, 0, 1]), t["c2.w"], stride=2)
    logits = F.linear(c2.mean((2, 3)), t["fc.w"], t["fc.b"])
    return logits, F.cross_entropy(logits, labels)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cnn_matches_onnxruntime_and_torch_gradients(dtype):
    rng = np.random.default_rng(2)
    model, feeds, params = cnn_model(rng, dtype)
    executor = d5pt.from_onnx(model)
    if dtype == np.float32:  # onnxruntime's CPU Conv has no float64 kernel
        assert_outputs_match(executor.inference(feeds), run_ort(model, feeds))
    result = executor.inference_and_backprop(feeds, "loss")
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
         for k, v in params.items()}
    logits, loss = cnn_torch(t, torch.tensor(feeds["x"], dtype=torch.float64),
                             torch.tensor(feeds["labels"]))
    loss.backward()
    if dtype == np.float64:
        np.testing.assert_allclose(result["logits"], logits.detach().numpy(), 1e-12, 1e-12)
    tol = (1e-4, 1e-5) if dtype == np.float32 else (1e-10, 1e-12)
    trained = executor.network.get_params()
    assert sorted(trained) == sorted(set(params) - {"bn.m", "bn.v"})
    for name in trained:
        got = result[gradient_name(name)]
        assert got.dtype == dtype
        np.testing.assert_allclose(got, t[name].grad.numpy(), *tol, err_msg=name)


def shape_graph(symbolic: bool):
    """y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) · W: the pattern
    torch.onnx emits for x.view(x.size(0), -1)."""
    rng = np.random.default_rng(3)
    nodes = [node("Shape", ["x"], ["s"]),
             node("Gather", ["s", "zero"], ["n"], axis=0),
             node("Unsqueeze", ["n", "axes"], ["n1"]),
             node("Concat", ["n1", "minus_one"], ["target"], axis=0),
             node("Reshape", ["x", "target"], ["flat"]),
             node("MatMul", ["flat", "W"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "axes": i64(0), "minus_one": i64(-1),
             "W": rand(rng, 12, 2)}
    feeds = {"x": rand(rng, 5, 3, 4)}
    return make_model(nodes, feeds, inits, symbolic=symbolic, name="shapes"), feeds


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_shape_computations(symbolic):
    model, feeds = shape_graph(symbolic)
    executor = d5pt.from_onnx(model)
    assert_outputs_match(executor.inference(feeds), run_ort(model, feeds))
    steps = executor.network.module._steps
    # Static shapes fold the whole shape computation away; symbolic ones keep it.
    assert len(steps) == (2 if not symbolic else 6)
    if symbolic:
        other = {"x": rand(np.random.default_rng(4), 2, 6, 2)}
        assert_outputs_match(executor.inference(other), run_ort(model, other))


def test_softmax_semantics_differ_between_opset_11_and_13():
    x = rand(np.random.default_rng(5), 2, 3, 4)
    results = {}
    for opset in (11, 13):
        model = make_model([node("Softmax", ["x"], ["y"], axis=1)], {"x": x}, opset=opset)
        results[opset] = d5pt.from_onnx(model).inference({"x": x})["y"]
        np.testing.assert_allclose(results[opset], run_ort(model, {"x": x})["y"],
                                   RTOL, ATOL)
    # Opset 11 normalises over axes 1 and 2 together, opset 13 over axis 1 only.
    np.testing.assert_allclose(results[11].sum((1, 2)), 1.0, rtol=1e-6)
    np.testing.assert_allclose(results[13].sum(1), 1.0, rtol=1e-6)
    assert not np.allclose(results[11], results[13])


# -- a torch.onnx export, and the native-module executor ---------------------------------
class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 8, 3, stride=2)
        self.fc = torch.nn.Linear(8 * 3 * 3, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.relu(self.conv2(x))
        return self.fc(x.view(x.size(0), -1))


@pytest.fixture(scope="module")
def exported_cnn(tmp_path_factory):
    torch.manual_seed(0)
    module = SmallCNN().eval()
    path = tmp_path_factory.mktemp("export") / "cnn.onnx"
    torch.onnx.export(module, (torch.randn(2, 1, 14, 14),), str(path), dynamo=False,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    proto = onnx.load(str(path))
    # A loss on top of the exported graph, for backprop.
    graph = proto.graph
    graph.node.append(helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"],
                                       ["loss"], name="loss_node"))
    graph.input.append(helper.make_tensor_value_info("labels", TensorProto.INT64, ["N"]))
    graph.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    with_loss = tmp_path_factory.mktemp("export") / "cnn_loss.onnx"
    onnx.save(proto, str(with_loss))
    rng = np.random.default_rng(6)
    feeds = {"x": rand(rng, 4, 1, 14, 14), "labels": i64(1, 9, 0, 3)}
    return module, path, with_loss, feeds


LEGACY_EXPORTER = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # dynamo=False


@LEGACY_EXPORTER
def test_torch_export_matches_module(exported_cnn):
    module, path, _, feeds = exported_cnn
    executor = d5pt.from_onnx(str(path))
    got = executor.inference({"x": feeds["x"]})["logits"]
    with torch.no_grad():
        want = module(torch.from_numpy(feeds["x"])).numpy()
    np.testing.assert_allclose(got, want, RTOL, ATOL)
    # Names of the exported initializers are the module's parameter names.
    assert sorted(executor.network.get_params()) == sorted(
        n for n, _ in module.named_parameters())


@LEGACY_EXPORTER
def test_native_executor_matches_from_onnx(exported_cnn):
    module, _, with_loss, feeds = exported_cnn
    onnx_executor = d5pt.from_onnx(str(with_loss))
    native = d5pt.PyTorchNativeGraphExecutor(
        module, ["x"], ["logits"],
        loss_fn=lambda outputs, inputs: F.cross_entropy(outputs["logits"], inputs["labels"]))
    np.testing.assert_allclose(native.inference(feeds)["logits"],
                               onnx_executor.inference(feeds)["logits"], RTOL, ATOL)
    got = native.inference_and_backprop(feeds, "loss")
    want = onnx_executor.inference_and_backprop(feeds, "loss")
    np.testing.assert_allclose(got["loss"], want["loss"], RTOL, ATOL)
    names = [n for n, _ in module.named_parameters()]
    assert sorted(k for k in got if k.endswith(".grad")) == sorted(
        gradient_name(n) for n in names)
    for name in names:
        np.testing.assert_allclose(got[gradient_name(name)], want[gradient_name(name)],
                                   rtol=1e-4, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(native.network.fetch_tensor(gradient_name(name)),
                                      got[gradient_name(name)])
    # The native network feeds and fetches parameters by named_parameters() name.
    network = native.network
    assert network.get_params() == names
    bias = network.fetch_tensor("fc.bias")
    network.feed_tensor("fc.bias", bias + 1)
    np.testing.assert_allclose(native.inference(feeds)["logits"],
                               onnx_executor.inference(feeds)["logits"] + 1, RTOL, 1e-5)
    network.feed_tensor("fc.bias", bias)
    with pytest.raises(UnsupportedError, match="native"):
        network.add_node(operators.Relu("relu", ["logits"], ["r"]))
    # Without a loss_fn, a scalar module output can serve as y; others cannot.
    plain = d5pt.PyTorchNativeGraphExecutor(module, ["x"], ["logits"])
    with pytest.raises(Deep500Error, match="scalar"):
        plain.inference_and_backprop({"x": feeds["x"]}, "logits")
    with pytest.raises(Deep500Error, match="needs inputs"):
        plain.inference({})


# -- events --------------------------------------------------------------------------------
class CountingEvent(ExecutorEvent):
    def __init__(self, wants: bool):
        self.wants_operator_events = wants
        self.before, self.after = [], []
        self.runs = 0

    def before_executor(self, inputs):
        self.runs += 1

    def before_operator(self, op):
        self.before.append(op.name)

    def after_operator(self, op):
        assert self.after == self.before[:-1]
        self.after.append(op.name)


def test_operator_events_fire_once_per_node_only_when_requested():
    model, feeds, _ = cnn_model(np.random.default_rng(7))
    wanted, unwanted = CountingEvent(True), CountingEvent(False)
    executor = d5pt.from_onnx(model, events=[wanted, unwanted])
    plain = d5pt.from_onnx(model)
    nodes = [op.name for op in executor.network.operations]
    executor.inference(feeds)
    assert wanted.before == wanted.after == nodes
    result = executor.inference_and_backprop(feeds, "loss")
    assert wanted.before == nodes * 2
    assert unwanted.before == unwanted.after == [] and unwanted.runs == 2
    assert_outputs_match(executor.inference(feeds), plain.inference(feeds))
    expected = plain.inference_and_backprop(feeds, "loss")
    assert_outputs_match(result, expected)
    # Folded nodes still appear to events.
    model, feeds = shape_graph(False)
    event = CountingEvent(True)
    d5pt.from_onnx(model, events=[event]).inference(feeds)
    assert len(event.before) == 6


def test_accelerator_code_paths_on_cpu():
    """What a GPU run does differently (one batched gradient copy, a synchronize around
    each operator's events), exercised with the CPU standing in for the device."""
    model, feeds, _ = cnn_model(np.random.default_rng(15))
    expected = d5pt.from_onnx(model).inference_and_backprop(feeds, "loss")
    event = CountingEvent(True)
    executor = d5pt.from_onnx(model, events=[event])
    syncs = []
    executor._on_cpu = False
    executor._synchronize = lambda: syncs.append(len(event.before))
    assert_outputs_match(executor.inference_and_backprop(feeds, "loss"), expected)
    nodes = len(executor.network.operations)
    assert len(syncs) == 2 * nodes  # before each node's events and after its work


@pytest.mark.slow
def test_compile_gives_the_same_results():
    model, feeds, _ = mlp_model(np.random.default_rng(8))
    eager, compiled = d5pt.from_onnx(model), d5pt.from_onnx(model, compile=True)
    assert_outputs_match(compiled.inference(feeds), eager.inference(feeds), 1e-4, 1e-5)
    assert_outputs_match(compiled.inference_and_backprop(feeds, "loss"),
                         eager.inference_and_backprop(feeds, "loss"), 1e-4, 1e-5)


# -- the Network API -------------------------------------------------------------------------
def test_network_fetch_feed_and_graph_edits():
    rng = np.random.default_rng(9)
    model, feeds, params = mlp_model(rng)
    executor = d5pt.from_onnx(model)
    network = executor.network
    assert isinstance(network, d5pt.PyTorchNetwork)
    np.testing.assert_array_equal(network.fetch_tensor("W1"), params["W1"])
    before = executor.inference(feeds)
    np.testing.assert_array_equal(network.fetch_tensor("logits"), before["logits"])
    np.testing.assert_array_equal(network.fetch_tensor("x"), feeds["x"])
    assert np.all(network.fetch_tensor("W1.grad") == 0)  # no backprop yet

    with pytest.raises(Deep500Error, match="add_output"):
        network.fetch_tensor("h")
    network.add_output("h")
    out = executor.inference(feeds)
    assert "h" in out
    np.testing.assert_allclose(out["h"], feeds["x"] @ params["W1"].T + params["b1"],
                               rtol=1e-5, atol=1e-6)

    network.feed_tensor("b2", np.zeros(3, np.float64))  # cast to the parameter's dtype
    assert network.fetch_tensor("b2").dtype == np.float32
    changed = executor.inference(feeds)["logits"]
    np.testing.assert_allclose(changed, before["logits"] - params["b2"], rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(Deep500Error, match="shape"):
        network.feed_tensor("b2", np.zeros(4, np.float32))

    # Replace Relu by Sigmoid: parameters (and their fed values) stay.
    network.remove_node("Relu_1")
    with pytest.raises(Deep500Error, match="reads \\['r'\\]"):
        executor.inference(feeds)  # the graph is incomplete until r is produced again
    network.add_node(operators.Sigmoid("sigmoid", ["h"], ["r"]))
    edited = executor.inference(feeds)["logits"]
    h = feeds["x"] @ params["W1"].T + params["b1"]
    np.testing.assert_allclose(edited, (1 / (1 + np.exp(-h))) @ params["W2"].T,
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(Deep500Error, match="no node"):
        network.remove_node("nonexistent")
    with pytest.raises(UnsupportedError, match="Bernoulli"):
        network.add_node(operators.Bernoulli("coin", ["h"], ["v"]))
    assert executor.inference(feeds)["logits"].shape == (5, 3)  # still the edited graph

    network.feed_tensor("extra", np.ones(3, np.float32), is_param=True)
    assert "extra" in network.get_params()
    network.add_node(operators.Add("add_extra", ["logits", "extra"], ["shifted"]))
    network.add_output("shifted")
    out = executor.inference(feeds)
    np.testing.assert_allclose(out["shifted"], out["logits"] + 1, rtol=1e-6)
    grads = executor.inference_and_backprop(feeds, "loss")
    assert np.all(grads["extra.grad"] == 0)  # the loss does not use it

    # Edits that leave the graph incomplete are built at the next run, which then
    # makes constants usable for backprop too (not inference-mode tensors).
    network.remove_node("sigmoid")
    network.add_node(operators.Shape("shape_of_x", ["x"], ["x_shape"]))
    network.add_output("x_shape")
    network.feed_tensor("r", np.ones((5, 8), np.float32), is_param=True)
    out = executor.inference(feeds)
    np.testing.assert_array_equal(out["x_shape"], [5, 4])
    grads = executor.inference_and_backprop(feeds, "loss")
    assert grads["r.grad"].shape == (5, 8) and np.any(grads["r.grad"] != 0)


def test_parameter_names_are_sanitized_and_mapped():
    model, _, params = cnn_model(np.random.default_rng(10))
    module = d5pt.from_onnx(model).network.module
    names = dict(module.named_parameters())
    assert "c1_w" in names and all("." not in n for n in names)
    assert sorted(module.onnx_names[n] for n in names) == sorted(set(params) -
                                                                 {"bn.m", "bn.v"})


# -- errors --------------------------------------------------------------------------------
def test_unsupported_operator_names_op_node_and_model():
    x = rand(np.random.default_rng(11), 3, 4)
    model = make_model([node("Relu", ["x"], ["r"], name="first"),
                        # random numbers: no Deep500 executor runs Bernoulli
                        node("Bernoulli", ["r"], ["y"], name="coin")],
                       {"x": x}, name="my_model")
    with pytest.raises(UnsupportedError) as info:
        d5pt.from_onnx(model)
    message = str(info.value)
    assert "Bernoulli" in message and "'coin'" in message and "my_model" in message


def test_backprop_errors():
    rng = np.random.default_rng(12)
    model, feeds, _ = mlp_model(rng)
    executor = d5pt.from_onnx(model)
    with pytest.raises(Deep500Error, match="scalar"):
        executor.inference_and_backprop(feeds, "logits")
    with pytest.raises(Deep500Error, match="not an output"):
        executor.inference_and_backprop(feeds, "h")
    x = rand(rng, 3)
    constant = make_model([node("ReduceSum", ["x"], ["loss"], keepdims=0)], {"x": x})
    with pytest.raises(Deep500Error, match="does not depend on any parameter"):
        d5pt.from_onnx(constant).inference_and_backprop({"x": x}, "loss")


def test_compile_with_operator_events_is_an_error():
    model, _, _ = mlp_model(np.random.default_rng(13))
    with pytest.raises(Deep500Error, match="compile"):
        d5pt.from_onnx(model, events=[CountingEvent(True)], compile=True)
    executor = d5pt.from_onnx(model, events=[CountingEvent(False)], compile=True)
    executor.events.append(CountingEvent(True))
    with pytest.raises(Deep500Error, match="compile"):
        executor.inference({"x": rand(np.random.default_rng(0), 2, 4),
                            "labels": i64(0, 1)})


def test_option_and_device_errors():
    model, _, _ = mlp_model(np.random.default_rng(14))
    with pytest.raises(Deep500Error, match="unknown options"):
        d5pt.from_onnx(model, jit=True)
    if not torch.cuda.is_available():
        with pytest.raises(UnsupportedError, match="CUDA"):
            d5pt.from_onnx(model, device="gpu")
