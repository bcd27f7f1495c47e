"""The PyTorch executor's elementwise, cast, logical, bitwise, activation, reduction,
indexing, quantization and signal operators (``deep500/frameworks/pytorch/ops/``, the
ones the executor's own test file does not exercise): one-node ONNX
models, forward against ``onnx.reference.ReferenceEvaluator`` (with the non-float inputs
fed at run time and, separately, stored as initializers so that the build-time paths
run too), gradients of float64 parameters against Deep500's reference executor."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import deep500.frameworks.pytorch as d5pt  # noqa: E402
import deep500.frameworks.reference as d5ref  # noqa: E402
from deep500.lv1_network import gradient_name  # noqa: E402
from deep500.utils.errors import Deep500Error  # noqa: E402

OPSET = 28
# float32 elementwise kernels of torch and NumPy differ by a few ulp (2**-23 ≈ 1.2e-7)
RTOL32, ATOL32 = 1e-5, 1e-6
# float64 gradients: the same formulas in another summation order
RTOL64, ATOL64 = 1e-9, 1e-12


@pytest.fixture(autouse=True, scope="module")
def single_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _model(nodes, feeds: dict, initializers: dict, outputs, opset=OPSET):
    def value_info(name, array):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))
    inputs = [value_info(n, a) for n, a in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers.items()]
    opsets = [helper.make_opsetid("", opset)] + [
        helper.make_opsetid(domain, 1) for domain in sorted({n.domain for n in nodes} - {""})]
    probe = helper.make_model(helper.make_graph(nodes, "ops_tensor", inputs, [], inits),
                              opset_imports=opsets, ir_version=10)
    inferred = onnx.shape_inference.infer_shapes(probe)
    known = {v.name: v for v in inferred.graph.value_info}
    declared = []
    for name in outputs:
        info = known.get(name)
        if info is None:
            info = helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
        info.type.tensor_type.shape.SetInParent()  # the checker wants a shape field
        declared.append(info)
    graph = helper.make_graph(nodes, "ops_tensor", inputs, declared, inits)
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


class Case:
    """One node: ``op`` over ``inputs`` (name -> array, '' names an omitted input);
    ``grad`` names the float inputs whose gradients are checked (in float64)."""

    def __init__(self, id, op, inputs, outputs=1, grad=(), opset=OPSET,
                 grad_dtype=np.float64, domain="", **attributes):
        assert "w" not in inputs  # the gradient test's loss weights
        self.id, self.op, self.inputs, self.grad_dtype = id, op, inputs, grad_dtype
        self.domain = domain
        self.outputs = [f"y{i}" for i in range(outputs)]
        self.grad, self.opset, self.attributes = tuple(grad), opset, attributes

    def node(self, outputs=None):
        return helper.make_node(self.op, list(self.inputs), outputs or self.outputs,
                                domain=self.domain or None, **self.attributes)

    def present_inputs(self):
        """(name, array) of the inputs given ('' marks an omitted optional input)."""
        return [(n, np.asarray(v)) for n, v in self.inputs.items() if n]

    def __repr__(self):
        return self.id


def r(*shape, dtype=np.float32, low=None, high=None, seed=0):
    rng = np.random.default_rng(seed + sum(shape))
    if low is not None:
        return rng.uniform(low, high, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def i64(*values):
    return np.array(values, np.int64)


def ints(*shape, low=-5, high=6, dtype=np.int32, seed=0):
    return np.random.default_rng(seed + 7 * sum(shape)).integers(
        low, high, shape).astype(dtype)


X = r(3, 4)
# ONNX types PyTorch carries in a wider one, and values that round, wrap and saturate
CARRIED = {name: np.dtype(getattr(ml_dtypes, np_name)) for name, np_name in (
    ("INT4", "int4"), ("UINT4", "uint4"), ("INT2", "int2"), ("UINT2", "uint2"),
    ("FLOAT4E2M1", "float4_e2m1fn"))}
SMALL_VALUES = np.array([0, 0.25, 0.5, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -1.5, -2.5,
                         -3.5, 7.9, 8, 9.5, 17, -8.5, -9, -100, 100, 255.5],
                        np.float32).reshape(2, 11)
TIES = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [0, 0, 0, 0]], np.float32)
BIG = np.array([1, 2**63 + 5, 2**64 - 1, 7], np.uint64)

CASES = [
    # -- elementwise math and activations ----------------------------------------------
    *[Case(op.lower(), op, {"x": X}, grad=["x"]) for op in
      ("Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Sign", "Softsign",
       "Softplus", "Mish", "HardSwish", "Elu", "Selu", "Celu", "HardSigmoid")],
    *[Case(op.lower(), op, {"x": r(3, 4, low=-0.9, high=0.9)}, grad=["x"])
      for op in ("Asin", "Acos", "Atanh")],
    Case("acosh", "Acosh", {"x": r(3, 4, low=1.1, high=4)}, grad=["x"]),
    Case("elu_alpha", "Elu", {"x": X}, grad=["x"], alpha=0.3),
    Case("selu_attrs", "Selu", {"x": X}, grad=["x"], alpha=1.5, gamma=2.0),
    Case("celu_alpha", "Celu", {"x": X}, grad=["x"], alpha=2.0),
    Case("hardsigmoid_attrs", "HardSigmoid", {"x": X}, grad=["x"], alpha=0.5, beta=0.6),
    Case("thresholdedrelu", "ThresholdedRelu", {"x": X}, grad=["x"], alpha=0.4),
    Case("shrink", "Shrink", {"x": X}, grad=["x"], bias=0.2, lambd=0.5),
    Case("shrink_int", "Shrink", {"x": ints(5, 4)}, bias=1.5, lambd=2.0),
    Case("swish", "Swish", {"x": X}, grad=["x"], alpha=0.7),
    Case("prelu", "PRelu", {"x": X, "slope": r(4, seed=3)}, grad=["x", "slope"]),
    Case("mean", "Mean", {"a": X, "b": r(4, seed=1), "c": r(3, 1, seed=2)},
         grad=["a", "b", "c"]),
    Case("det", "Det", {"x": r(2, 3, 3)}, grad=["x"]),
    Case("round", "Round", {"x": np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.2, 2.7],
                                          np.float32)}),
    Case("isnan", "IsNaN", {"x": np.array([np.nan, 1, np.inf, -np.inf], np.float32)}),
    Case("isinf", "IsInf", {"x": np.array([np.nan, 1, np.inf, -np.inf], np.float32)}),
    Case("isinf_positive", "IsInf", {"x": np.array([np.nan, np.inf, -np.inf], np.float64)},
         detect_negative=0),
    Case("isinf_negative", "IsInf", {"x": np.array([np.nan, np.inf, -np.inf], np.float32)},
         detect_positive=0),
    Case("mod_int", "Mod", {"a": ints(4, 5), "b": ints(5, low=1, high=4) * np.array(
        [1, -1, 1, -1, 1], np.int32)}),
    Case("mod_fmod_int", "Mod", {"a": ints(4, 5), "b": np.array([3, -3, 2, -2, 7],
                                                                 np.int32)}, fmod=1),
    Case("mod_fmod_float", "Mod", {"a": X * 4, "b": np.full(4, -1.5, np.float32)},
         fmod=1),
    Case("mod_uint32", "Mod", {"a": ints(6, low=0, high=50, dtype=np.uint32),
                               "b": ints(6, low=1, high=7, dtype=np.uint32)}),
    Case("cast_like_half", "CastLike", {"x": X, "like": np.zeros(1, np.float16)}),
    Case("cast_like_int", "CastLike", {"x": X.astype(np.float64) * 3,
                                       "like": np.zeros(1, np.int32)}),
    Case("cast_like_bool", "CastLike", {"x": ints(3, 4), "like": np.zeros(1, bool)}),
    Case("cast_like_grad", "CastLike", {"x": X.astype(np.float64),
                                        "like": np.zeros(1, np.float32)}),
    *[Case(f"bitcast_{np.dtype(x.dtype).name}", "BitCast", {"x": x},
           to=helper.np_dtype_to_tensor_dtype(np.dtype(to)))
      for x, to in ((X, np.int32), (X.astype(np.float64)[0, 0], np.int64),
                    (ints(5, dtype=np.int8), np.uint8), (BIG, np.float64),
                    (r(4) > 0, np.uint8), (ints(3, dtype=np.uint16), np.int16))],
    # -- logical, comparisons and bits ---------------------------------------------------
    *[Case(op.lower(), op, {"a": r(3, 4) > 0, "b": r(4, seed=5) > 0})
      for op in ("And", "Or", "Xor")],
    *[Case(f"{op.lower()}_{np.dtype(t).name}", op, {"a": ints(3, 4, low=0, dtype=t),
                                                  "b": ints(4, low=0, seed=1, dtype=t)})
      for op in ("LessOrEqual", "GreaterOrEqual") for t in (np.int32, np.uint16)],
    Case("lessorequal_float", "LessOrEqual", {"a": X, "b": X[:, :1]}),
    Case("greaterorequal_uint64_big", "GreaterOrEqual", {"a": BIG, "b": BIG[::-1].copy()}),
    *[Case(f"{op.lower()}_{np.dtype(t).name}", op, {"a": ints(3, 4, low=0, high=200,
                                                             dtype=t),
                                                  "b": ints(4, low=0, high=200, seed=1,
                                                            dtype=t)})
      for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")
      for t in (np.int32, np.uint8, np.uint16)],
    *[Case(f"bitwisenot_{np.dtype(t).name}", "BitwiseNot",
           {"x": ints(3, 4, low=0, high=100, dtype=t)})
      for t in (np.int32, np.uint16, np.uint32)],
    Case("bitwisenot_uint64", "BitwiseNot", {"x": BIG}),
    *[Case(f"bitshift_{d.lower()}_{np.dtype(t).name}", "BitShift",
           {"x": ints(6, low=0, high=250, dtype=t), "s": ints(6, low=0, high=7, dtype=t)},
           direction=d)
      for d in ("LEFT", "RIGHT") for t in (np.uint8, np.uint16, np.uint32, np.uint64)],
    Case("bitshift_right_uint64_big", "BitShift",
         {"x": BIG, "s": np.array([0, 1, 63, 3], np.uint64)}, direction="RIGHT"),
    Case("bitshift_left_uint64_big", "BitShift",
         {"x": BIG, "s": np.array([0, 1, 2, 60], np.uint64)}, direction="LEFT"),
    # -- reductions ------------------------------------------------------------------
    *[Case(f"{op.lower()}_{name}", op, {"x": r(2, 3, 4, low=0.2, high=2), **axes},
           grad=["x"], **attrs)
      for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMin",
                 "ReduceProd", "ReduceSumSquare")
      for name, axes, attrs in (
          ("axis1", {"axes": i64(1)}, {}),
          ("axes_neg_nokeep", {"axes": i64(-1, 0)}, {"keepdims": 0}),
          ("all", {}, {}),
          ("all_nokeep", {}, {"keepdims": 0}),
          ("noop", {"axes": np.zeros(0, np.int64)}, {"noop_with_empty_axes": 1}))],
    Case("reducemin_int", "ReduceMin", {"x": ints(3, 4), "axes": i64(0)}),
    Case("reducemin_bool", "ReduceMin", {"x": r(3, 4) > 0, "axes": i64(1)}),
    Case("reducemin_empty", "ReduceMin", {"x": np.zeros((2, 0, 3), np.float32),
                                          "axes": i64(1)}),
    Case("reduceprod_empty", "ReduceProd", {"x": np.zeros((2, 0, 3), np.float32),
                                            "axes": i64(1)}),
    Case("reducelogsumexp_empty", "ReduceLogSumExp",
         {"x": np.zeros((2, 0, 3), np.float32), "axes": i64(1)}, keepdims=0),
    Case("reducel2_int", "ReduceL2", {"x": ints(3, 4), "axes": i64(1)}),
    *[Case(f"{op.lower()}_{name}", op, {"x": TIES}, **attrs)
      for op in ("ArgMax", "ArgMin")
      for name, attrs in (("default", {}), ("last", {"select_last_index": 1}),
                          ("axis1_nokeep", {"axis": 1, "keepdims": 0}),
                          ("neg_last", {"axis": -1, "select_last_index": 1}))],
    *[Case(f"topk_{name}", "TopK", {"x": TIES * 1.5, "k": i64(2)}, outputs=2, **attrs)
      for name, attrs in (("default", {}), ("smallest", {"largest": 0}),
                          ("axis0", {"axis": 0}), ("neg_axis_smallest",
                                                   {"axis": -1, "largest": 0}))],
    Case("topk_grad", "TopK", {"x": X, "k": i64(3)}, outputs=2, grad=["x"]),
    Case("topk_int", "TopK", {"x": ints(3, 5), "k": i64(2)}, outputs=2),
    # -- cumulative ------------------------------------------------------------------
    *[Case(f"{op.lower()}_{name}", op, {"x": r(3, 4, low=0.5, high=1.5),
                                        "axis": np.array(axis, np.int32)},
           grad=["x"], **attrs)
      for op in ("CumSum", "CumProd")
      for name, axis, attrs in (("axis0", 0, {}), ("axis1_exclusive", 1, {"exclusive": 1}),
                                ("reverse", -1, {"reverse": 1}),
                                ("both", 0, {"exclusive": 1, "reverse": 1}))],
    Case("cumsum_int32", "CumSum", {"x": ints(3, 4), "axis": np.array(1, np.int64)},
         exclusive=1),
    # -- indexing --------------------------------------------------------------------
    Case("gatherelements", "GatherElements", {"x": X, "i": np.array(
        [[0, -1], [2, 1], [-4, 3]], np.int64)}, grad=["x"], axis=1),
    Case("gatherelements_axis0", "GatherElements", {"x": X, "i": np.array(
        [[0, 2, 1, -1]], np.int32)}, grad=["x"], axis=0),
    Case("gathernd", "GatherND", {"x": r(3, 4, 2), "i": np.array(
        [[0, 1], [2, -1], [0, 1]], np.int64)}, grad=["x"]),
    Case("gathernd_batch", "GatherND", {"x": r(2, 3, 4), "i": np.array(
        [[[1], [0]], [[2], [-1]]], np.int64)}, grad=["x"], batch_dims=1),
    Case("gathernd_full", "GatherND", {"x": r(3, 4), "i": np.array(
        [[0, 0], [2, 3]], np.int64)}, grad=["x"]),
    *[Case(f"scatternd_{red}", "ScatterND", {
        "x": r(4, 3, low=0.5, high=2), "i": np.array([[1], [3], [-4]], np.int64),
        "u": r(3, 3, low=0.5, high=2, seed=4)}, grad=["x", "u"], reduction=red)
      for red in ("none", "add", "mul", "max", "min")],
    Case("scatternd_add_repeated", "ScatterND", {"x": r(4, 3), "i": np.array(
        [[1, 2], [1, 2], [0, 0]], np.int64), "u": r(3, seed=4)}, grad=["x", "u"],
         reduction="add"),
    *[Case(f"scatterelements_{red}", "ScatterElements", {
        "x": r(3, 4, low=0.5, high=2), "i": np.array([[1, -1], [0, 2], [3, 3]], np.int64),
        "u": r(3, 2, low=0.5, high=2, seed=4)}, grad=["x", "u"], axis=1, reduction=red)
      for red in ("none", "add", "mul", "max", "min")],
    Case("swiglu", "SwiGLU", {"a": X, "b": r(3, 4, seed=2)}, grad=["a", "b"]),
    Case("swiglu_alpha", "SwiGLU", {"a": X, "b": r(3, 4, seed=2)}, grad=["a", "b"],
         alpha=1.702),
    Case("tensorscatter", "TensorScatter", {"past": r(2, 3, 5, 4), "u": r(2, 3, 2, 4,
                                                                           seed=1)},
         grad=["past", "u"]),
    Case("tensorscatter_indices", "TensorScatter", {
        "past": r(2, 5, 3), "u": r(2, 2, 3, seed=1), "wi": i64(1, 3)},
         grad=["past", "u"], axis=1),
    Case("tensorscatter_circular", "TensorScatter", {
        "past": r(2, 4, 3), "u": r(2, 3, 3, seed=1), "wi": i64(2, 3)},
         grad=["past", "u"], axis=-2, mode="circular"),
    Case("reversesequence_time0", "ReverseSequence", {"x": r(4, 3, 2), "l": i64(4, 1, 3)},
         grad=["x"]),
    Case("reversesequence_batch0", "ReverseSequence", {"x": r(3, 5, 2),
                                                       "l": i64(2, 5, 1)},
         grad=["x"], batch_axis=0, time_axis=1),
    Case("compress_axis", "Compress", {"x": X, "c": np.array([1, 0, 1], bool)},
         grad=["x"], axis=0),
    Case("compress_short", "Compress", {"x": X, "c": np.array([0, 1], bool)},
         grad=["x"], axis=-1),
    Case("compress_flat", "Compress", {"x": X, "c": r(12) > 0}, grad=["x"]),
    Case("nonzero", "NonZero", {"x": ints(3, 4, low=-1, high=2)}),
    Case("nonzero_float", "NonZero", {"x": np.array([[0, 1.5], [2, 0]], np.float32)}),
    *[Case(f"unique_{name}", "Unique", {"x": x}, outputs=4, **attrs)
      for name, x, attrs in (
          ("sorted", np.array([2, 1, 1, 3, 4, 3], np.float32), {}),
          ("unsorted", np.array([2, 1, 1, 3, 4, 3], np.float32), {"sorted": 0}),
          ("axis", np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.int64), {"axis": 0}),
          ("neg_axis", np.array([[1, 0, 1], [1, 0, 1]], np.int64), {"axis": -1}))],
    # -- quantization and windows ----------------------------------------------------
    Case("quantize_uint8", "QuantizeLinear", {"x": X * 40, "s": np.array(0.5, np.float32)}),
    Case("quantize_int8_zero", "QuantizeLinear", {
        "x": X * 90, "s": np.array(0.5, np.float32), "z": np.array(-3, np.int8)}),
    Case("quantize_axis", "QuantizeLinear", {
        "x": r(2, 3, 4) * 50, "s": np.array([0.5, 1, 2], np.float32),
        "z": np.array([0, 10, 250], np.uint8)}, axis=1),
    Case("quantize_blocked", "QuantizeLinear", {
        "x": r(3, 5) * 50, "s": r(3, 3, low=0.2, high=2, seed=1),
        "z": ints(3, 3, low=-20, high=20, dtype=np.int16)}, axis=1, block_size=2),
    Case("quantize_uint16_output_dtype", "QuantizeLinear", {
        "x": X * 3e4, "s": np.array(1.5, np.float32)},
         output_dtype=onnx.TensorProto.UINT16),
    Case("quantize_half", "QuantizeLinear", {
        "x": (X * 40).astype(np.float16), "s": np.array(0.25, np.float16),
        "z": np.array(5, np.int8)}),
    Case("dequantize", "DequantizeLinear", {
        "x": ints(3, 4, low=0, high=255, dtype=np.uint8), "s": np.array(0.5, np.float32),
        "z": np.array(128, np.uint8)}, grad=["s"], grad_dtype=np.float32),
    Case("dequantize_axis", "DequantizeLinear", {
        "x": ints(2, 3, 4, low=-128, high=127, dtype=np.int8),
        "s": np.array([0.5, 1.5, 0.1], np.float32), "z": np.array([1, 0, -4], np.int8)},
         grad=["s"], grad_dtype=np.float32, axis=1),
    Case("dequantize_blocked", "DequantizeLinear", {
        "x": ints(3, 5, dtype=np.int16), "s": r(3, 3, low=0.2, high=2, seed=1)},
         grad=["s"], grad_dtype=np.float32, axis=-1, block_size=2),
    Case("dequantize_int32_half", "DequantizeLinear", {
        "x": ints(6, low=-1000, high=1000), "s": np.array(0.125, np.float16)}),
    Case("dequantize_output_dtype", "DequantizeLinear", {
        "x": ints(3, 4, low=0, high=255, dtype=np.uint8), "s": np.array(0.5, np.float32)},
         output_dtype=onnx.TensorProto.FLOAT16),
    Case("dynamicquantize", "DynamicQuantizeLinear", {"x": X}, outputs=3),
    Case("dynamicquantize_positive", "DynamicQuantizeLinear", {"x": np.abs(X) + 1},
         outputs=3),
    Case("matmulinteger", "MatMulInteger", {
        "a": ints(3, 4, low=0, high=255, dtype=np.uint8),
        "b": ints(4, 2, low=0, high=255, dtype=np.uint8, seed=1),
        "az": np.array(12, np.uint8), "bz": np.array([3, 9], np.uint8)}),
    Case("matmulinteger_int8", "MatMulInteger", {
        "a": ints(2, 3, 4, low=-128, high=127, dtype=np.int8),
        "b": ints(4, 2, low=-128, high=127, dtype=np.int8, seed=1)}),
    *[Case(f"qlinearmatmul_{np.dtype(t).name}_{np.dtype(f).name}", "QLinearMatMul", {
        "a": ints(2, 3, 4, low=lo, high=hi, dtype=t), "as": np.array(0.05, f),
        "az": np.array(3, t), "b": ints(4, 2, low=lo, high=hi, dtype=t, seed=1),
        "bs": np.array(0.02, f), "bz": np.array(-1 if lo else 7, t),
        "ys": np.array(0.3, f), "yz": np.array(5, t)})
      for t, lo, hi in ((np.uint8, 0, 255), (np.int8, -128, 127))
      for f in (np.float32, np.float16)],
    *[Case(f"{op.lower()}_{periodic}", op, {"n": np.array(n, np.int64)},
           periodic=periodic, **({} if periodic else {"output_datatype": 11}))
      for op in ("HannWindow", "HammingWindow", "BlackmanWindow")
      for periodic, n in ((1, 10), (0, 7))],
    # -- signal processing and detection --------------------------------------------
    *[Case(f"dft_{name}", "DFT", {"x": x, "": None, **extra}, grad=["x"],
           **attrs)
      for name, x, extra, attrs in (
          ("real", r(2, 8, 3, 1), {"axis": np.array(1, np.int64)}, {}),
          ("complex_axis", r(2, 3, 6, 2), {"axis": np.array(-2, np.int64)}, {}),
          ("inverse", r(2, 5, 3, 2), {"axis": np.array(1, np.int64)}, {"inverse": 1}),
          ("rfft", r(2, 8, 3, 1), {"axis": np.array(1, np.int64)}, {"onesided": 1}),
          ("default_axis", r(2, 6, 2), {}, {}))],
    Case("dft_length", "DFT", {"x": r(2, 6, 1), "n": np.array(8, np.int64),
                                "axis": np.array(1, np.int64)}, grad=["x"]),
    Case("dft_length_trim", "DFT", {"x": r(2, 6, 2), "n": np.array(4, np.int64),
                                     "axis": np.array(1, np.int64)}, grad=["x"]),
    Case("stft", "STFT", {"x": r(2, 40, 1), "step": np.array(6, np.int64), "": None,
                          "n": np.array(8, np.int64)}, grad=["x"]),
    Case("stft_window", "STFT", {"x": r(1, 30, 1), "step": np.array(4, np.int64),
                                 "win": r(10, low=0, high=1, seed=3)}, grad=["x", "win"]),
    Case("stft_complex_twosided", "STFT", {"x": r(2, 20, 2), "step": np.array(5, np.int64),
                                           "win": r(6, low=0, high=1, seed=3)},
         grad=["x", "win"], onesided=0),
    *[Case(f"nonmaxsuppression_{name}", "NonMaxSuppression", inputs, **attrs)
      for name, inputs, attrs in (
          ("basic", {"b": np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9],
                                     [0, 10, 1, 11], [1, 10.1, 0, 11.1], [0, 100, 1, 101]]],
                                   np.float32),
                     "s": np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3],
                                     [0.1, 0.9, 0.9, 0.2, 0.95, 0.3]]], np.float32),
                     "m": i64(3), "iou": np.array([0.5], np.float32),
                     "st": np.array([0.25], np.float32)}, {}),
          ("ties_no_threshold", {"b": np.tile(np.array([[0, 0, 1, 1]], np.float32),
                                              (2, 4, 1)),
                                 "s": np.full((2, 1, 4), 0.5, np.float32), "m": i64(2),
                                 "iou": np.array([1.0], np.float32)},
           {}),
          ("center", {"b": np.array([[[0.5, 0.5, 1, 1], [0.5, 0.6, 1, 1],
                                      [0.5, 10.5, 1, 1]]], np.float32),
                      "s": np.array([[[0.9, 0.95, 0.3]]], np.float32), "m": i64(5),
                      "iou": np.array([0.5], np.float32)}, {"center_point_box": 1}))],
    # -- shapes ----------------------------------------------------------------------
    *[Case(f"trilu_{'upper' if upper else 'lower'}_{k}", "Trilu",
           {"x": r(2, 3, 4), **({} if k is None else {"k": i64(k)})}, grad=["x"],
           upper=upper)
      for upper in (0, 1) for k in (None, -1, 0, 2, 5)],
    Case("trilu_int", "Trilu", {"x": ints(4, 3), "k": i64(1)}),
    Case("tile", "Tile", {"x": X, "r": i64(2, 3)}, grad=["x"]),
    Case("tile_3d", "Tile", {"x": r(2, 1, 3), "r": i64(1, 4, 2)}, grad=["x"]),
    *[Case(f"einsum_{name}", "Einsum", xs, grad=list(xs), equation=eq)
      for name, eq, xs in (
          ("matmul", "ij,jk->ik", {"a": r(3, 4), "b": r(4, 2)}),
          ("batch", "bij, bjk -> bik", {"a": r(2, 3, 4), "b": r(2, 4, 5)}),
          ("transpose", "ij->ji", {"a": r(3, 4)}),
          ("sum", "ij->i", {"a": r(3, 4)}),
          ("diagonal", "ii->i", {"a": r(3, 3)}),
          ("ellipsis", "...ij,...jk", {"a": r(2, 3, 4), "b": r(2, 4, 2)}),
          ("inner", "i,i", {"a": r(4), "b": r(4, seed=2)}))],
    *[Case(f"onehot_{name}", "OneHot", {"i": indices, "depth": depth,
                                        "v": np.array([-1, 3], np.float32)}, **attrs)
      for name, indices, depth, attrs in (
          ("default", np.array([[0, 2], [1, -1]], np.int64), np.array(3, np.int64), {}),
          ("axis0", np.array([0, 2, 4, -3], np.int32), np.array(4, np.int64),
           {"axis": 0}),
          ("axis_neg2", np.array([[1.0, 3.0], [0.0, 2.0]], np.float32),
           np.array(4.0, np.float32), {"axis": -2}))],
    Case("hardmax", "Hardmax", {"x": TIES}),
    Case("hardmax_axis0", "Hardmax", {"x": r(3, 2, 4)}, axis=0),
    Case("eyelike", "EyeLike", {"x": X}),
    Case("eyelike_k_dtype", "EyeLike", {"x": X}, k=1, dtype=onnx.TensorProto.INT32),
    Case("eyelike_neg_k", "EyeLike", {"x": ints(4, 3)}, k=-2),
    *[Case(f"depthtospace_{mode.lower()}", "DepthToSpace", {"x": r(2, 8, 2, 3)},
           grad=["x"], blocksize=2, mode=mode) for mode in ("DCR", "CRD")],
    *[Case(f"spacetodepth_{mode.lower()}", "SpaceToDepth", {"x": r(2, 2, 4, 6)},
           grad=["x"], blocksize=2, mode=mode) for mode in ("DCR", "CRD")],
    # -- CausalConvWithState: depthwise, causal, carrying its last k - 1 positions -----
    # (float types only: gradients in float32)
    *[Case(f"causalconvwithstate_{name}", "CausalConvWithState", inputs, outputs=2,
           grad=[n for n in inputs if n], grad_dtype=np.float32, **attrs)
      for name, inputs, attrs in (
          ("no_state", {"x": r(2, 3, 5), "k": r(3, 1, 3, seed=1)}, {}),
          ("state_bias_silu", {"x": r(2, 3, 4), "k": r(3, 1, 4, seed=1),
                               "b": r(3, seed=2), "past": r(2, 3, 3, seed=3)},
           {"activation": "silu"}),
          ("state_no_bias", {"x": r(1, 2, 1), "k": r(2, 1, 2, seed=1), "": None,
                             "past": r(1, 2, 1, seed=3)}, {"activation": "swish"}),
          ("k1", {"x": r(1, 2, 3), "k": r(2, 1, 1, seed=1)}, {}))],
    # -- pooling with what PyTorch's kernels lack: dilated averages, column-major
    # indices (storage_order 1)
    *[Case(f"averagepool_dilated_{name}", "AveragePool", {"x": r(1, 2, 7, 6)},
           grad=["x"], kernel_shape=[2, 3], dilations=[2, 2], **attrs)
      for name, attrs in (
          ("plain", {}),
          ("pads", {"pads": [1, 0, 2, 2]}),
          ("pads_included", {"pads": [1, 0, 2, 2], "count_include_pad": 1}),
          ("ceil", {"strides": [2, 2], "ceil_mode": 1}),
          ("ceil_pads_included", {"strides": [2, 3], "pads": [1, 1, 0, 1], "ceil_mode": 1,
                                  "count_include_pad": 1}))],
    Case("averagepool_dilated_1d", "AveragePool", {"x": r(2, 3, 9)}, grad=["x"],
         kernel_shape=[3], dilations=[3], pads=[2, 1], count_include_pad=1),
    *[Case(f"maxpool_indices_storage_{order}", "MaxPool", {"x": r(2, 3, 5, 7)}, outputs=2,
           kernel_shape=[2, 3], strides=[2, 2], storage_order=order) for order in (0, 1)],
    # -- quantized convolutions, melweightmatrix, ai.onnx.ml -----------------------------
    Case("convinteger", "ConvInteger", {"x": ints(1, 2, 5, 5, low=0, high=256,
                                                  dtype=np.uint8),
                                        "k": ints(3, 2, 3, 3, low=0, high=256,
                                                  dtype=np.uint8, seed=1),
                                        "xz": np.array(128, np.uint8),
                                        "kz": np.array([3, 200, 17], np.uint8)},
         pads=[1, 0, 1, 2], strides=[1, 2]),
    Case("convinteger_int8_groups", "ConvInteger",
         {"x": ints(2, 4, 6, low=-128, high=128, dtype=np.int8),
          "k": ints(4, 2, 3, low=-128, high=128, dtype=np.int8, seed=1)}, group=2),
    Case("qlinearconv", "QLinearConv", {
        "x": ints(1, 2, 5, 4, low=0, high=256, dtype=np.uint8),
        "xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8),
        "k": ints(3, 2, 2, 2, low=-128, high=128, dtype=np.int8, seed=1),
        "ks": np.array([0.01, 0.03, 0.002], np.float32), "kz": np.zeros(3, np.int8),
        "ys": np.array(0.05, np.float32), "yz": np.array(100, np.uint8),
        "bias": np.array([500, -2000, 7], np.int32)}, pads=[1, 1, 0, 0]),
    Case("melweightmatrix", "MelWeightMatrix", {
        "bins": np.array(8), "dft": np.array(64), "rate": np.array(8000),
        "low": np.array(0.0, np.float32), "high": np.array(4000.0, np.float32)}),
    Case("melweightmatrix_float64", "MelWeightMatrix", {
        "bins": np.array(5), "dft": np.array(100), "rate": np.array(16000),
        "low": np.array(300.0, np.float32), "high": np.array(6000.0, np.float32)},
         output_datatype=onnx.TensorProto.DOUBLE),
    Case("binarizer", "Binarizer", {"x": X}, domain="ai.onnx.ml", threshold=0.3),
    Case("arrayfeatureextractor", "ArrayFeatureExtractor", {"x": r(2, 3, 5), "i": i64(4, 0, 4)},
         domain="ai.onnx.ml"),
    Case("arrayfeatureextractor_1d", "ArrayFeatureExtractor", {"x": r(5), "i": i64(1, 3)},
         domain="ai.onnx.ml"),
    # -- Dropout with a fed training_mode: read at every run (ratio 0: deterministic)
    *[Case(f"dropout_fed_mode_{int(mode)}", "Dropout", {
        "x": X, "ratio": np.array(0.0, np.float32), "mode": np.array(mode)}, outputs=2)
      for mode in (False, True)],
    # -- Pad: fed pads, axes and value are read at every run ----------------------------
    Case("pad_value", "Pad", {"x": r(2, 3, 4), "pads": i64(1, 0, 0, 2, 1, 3),
                              "v": np.array(1.5, np.float32)}, grad=["x", "v"]),
    Case("pad_axes", "Pad", {"x": r(2, 3, 4), "pads": i64(2, 0, 1, 3), "": None,
                             "axes": i64(-1, 0)}, grad=["x"]),
    Case("pad_minus_inf", "Pad", {"x": r(2, 3), "pads": i64(0, 1, 0, 2),
                                  "v": np.array(-np.inf, np.float32)}),
    *[Case(f"pad_{mode}", "Pad", {"x": r(1, 2, 4, 5), "pads": i64(0, 0, 1, 2, 0, 0, 2, 1)},
           grad=["x"], mode=mode) for mode in ("edge", "reflect", "wrap")],
    # -- producing carried types (int4, uint4, int2, uint2 in int8/uint8, float4 in
    # float32): Cast, CastLike and QuantizeLinear round, wrap and saturate there
    *[Case(f"cast_to_{name.lower()}", "Cast", {"x": SMALL_VALUES},
           to=getattr(onnx.TensorProto, name)) for name in CARRIED],
    *[Case(f"castlike_to_{name.lower()}", "CastLike",
           {"x": SMALL_VALUES, "like": np.zeros(2, CARRIED[name])}) for name in CARRIED],
    Case("cast_to_float4_specials", "Cast", {"x": np.array(
        [np.nan, -np.nan, np.inf, -np.inf, 5.0, 7.0, -0.2, 2.5e-1, 1e-30], np.float32)},
         to=onnx.TensorProto.FLOAT4E2M1),
    *[Case(f"quantizelinear_{name.lower()}", "QuantizeLinear",
           {"x": SMALL_VALUES * 3, "s": np.array(0.5, np.float32),
            "z": np.array(1 if name != "FLOAT4E2M1" else 0, CARRIED[name])})
      for name in CARRIED],
    Case("quantizelinear_int4_output_dtype", "QuantizeLinear",
         {"x": SMALL_VALUES, "s": np.array(0.25, np.float32)},
         output_dtype=onnx.TensorProto.INT4),
]


def _split(case, constants):
    """(feeds, initializers): the float inputs are always fed; the others are fed or,
    with ``constants``, stored in the model."""
    feeds, inits = {}, {}
    for name, value in case.present_inputs():
        target = inits if constants and value.dtype.kind != "f" else feeds
        target[name] = value
    return feeds, inits


def _tolerance(array):
    return (RTOL32, ATOL32) if array.dtype != np.float64 else (1e-12, 1e-14)


@pytest.mark.parametrize("constants", [False, True], ids=["fed", "constants"])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_forward_matches_onnx_reference(case, constants):
    feeds, inits = _split(case, constants)
    model = _model([case.node()], feeds, inits, case.outputs, case.opset)
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = d5pt.from_onnx(model).inference(feeds)
    for name, want in zip(case.outputs, expected):
        have = np.asarray(got[name])
        assert have.dtype == want.dtype, (name, have.dtype, want.dtype)
        assert have.shape == want.shape, (name, have.shape, want.shape)
        if want.dtype.kind == "f":
            rtol, atol = _tolerance(want)
            np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(have, want, err_msg=name)


GRADIENT_CASES = [c for c in CASES if c.grad]


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=repr)
def test_gradients_match_reference_executor(case):
    """loss = Σ y·w with a fed random w; the differentiated inputs are float64
    parameters (initializers), the others are fed."""
    inits, feeds = {}, {}
    for name, value in case.present_inputs():
        if name in case.grad:
            inits[name] = value.astype(case.grad_dtype)
        else:
            feeds[name] = value
    probe = _model([case.node()], feeds, inits, case.outputs, case.opset)
    first = ReferenceEvaluator(probe).run(None, {**feeds})[0]
    feeds["w"] = np.random.default_rng(11).standard_normal(first.shape).astype(first.dtype)
    nodes = [case.node(), helper.make_node("Mul", ["y0", "w"], ["p"]),
             helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)]
    model = _model(nodes, feeds, inits, ["loss"], case.opset)
    got = d5pt.from_onnx(model).inference_and_backprop(feeds, "loss")
    if case.op in WITHOUT_REFERENCE_BACKWARD:
        want, rtol, atol = _central_differences(model, feeds, inits, case.grad), 1e-6, 1e-8
    else:
        want = d5ref.from_onnx(model).inference_and_backprop(feeds, "loss")
        rtol, atol = RTOL64, ATOL64
        if case.grad_dtype == np.float32:
            # DequantizeLinear takes no float64 scale, CausalConvWithState no float64:
            # both executors sum products in float32, in their own orders: a few ulps
            # of float32 of sums of ~100 terms of size ~1 (rtol 1e-5 ≈ 80 eps32
            # relative to the sum).
            rtol, atol = 1e-5, 1e-5
        np.testing.assert_allclose(got["loss"], want["loss"], rtol=rtol, atol=atol)
    for name in case.grad:
        key = gradient_name(name)
        assert got[key].shape == inits[name].shape
        np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=atol, err_msg=key)


# Operators the reference executor lacks: finite differences of onnx's evaluator instead.
WITHOUT_REFERENCE_BACKWARD = {"TensorScatter", "STFT"}


def _central_differences(model, feeds, inits, names, step=1e-6):
    """d loss / d initializer by central differences in float64; the loss is linear in
    the operator's output and the operators are smooth, so the error is O(step²) plus
    rounding ~1e-16/step = 1e-10."""
    def loss(values):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.graph.ClearField("initializer")
        m.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in values.items())
        return float(ReferenceEvaluator(m).run(None, feeds)[0])
    result = {}
    for name in names:
        grad = np.zeros_like(inits[name])
        for index in np.ndindex(grad.shape):
            values = {n: v.copy() for n, v in inits.items()}
            values[name][index] += step
            up = loss(values)
            values[name][index] -= 2 * step
            grad[index] = (up - loss(values)) / (2 * step)
        result[gradient_name(name)] = grad
    return result


def test_computing_with_a_carried_type_is_unsupported():
    """int4 values are carried in int8, which gives ONNX's results only where they are
    read or produced (Cast, CastLike, QuantizeLinear, ...): a node computing with them
    fails while building, naming the type, the value and the node."""
    a = helper.make_tensor_value_info("a", onnx.TensorProto.INT4, [2])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.INT4, [4])
    pads = numpy_helper.from_array(i64(1, 1), "pads")
    graph = helper.make_graph([helper.make_node("Pad", ["a", "pads"], ["y"], name="pad0")],
                              "g", [a], [y], [pads])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)],
                              ir_version=10)
    with pytest.raises(Deep500Error, match="(?s)int4.*'a'.*pad0"):
        d5pt.from_onnx(model)


@pytest.mark.parametrize("op_type,states,attributes", [
    ("Adagrad", 1, {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}),
    ("Momentum", 1, {"alpha": 0.9, "beta": 0.5, "mode": "standard",
                     "norm_coefficient": 0.01}),
    ("Momentum", 1, {"alpha": 0.9, "beta": 0.5, "mode": "nesterov",
                     "norm_coefficient": 0.0}),
    ("Adam", 2, {"alpha": 0.8, "beta": 0.9, "epsilon": 1e-5, "norm_coefficient": 0.01,
                 "norm_coefficient_post": 0.02})], ids=["adagrad", "momentum", "nesterov",
                                                        "adam"])
@pytest.mark.parametrize("step", [0, 3])
def test_optimizer_steps_match_onnx_reference(op_type, states, attributes, step):
    """One step of ai.onnx.preview.training's optimizers over two tensors of different
    shapes, against onnx's reference evaluator (which computes the scalars in float64,
    as the executor does: float32 results within a few ulp)."""
    domain = "ai.onnx.preview.training"
    # X, G and the states of two tensors, (3, 4) and (5,); the states (accumulated
    # squares among them) non-negative
    groups = [[f"{kind}_a", f"{kind}_b"] for kind in ["x", "g"] + [f"s{i}" for i in
                                                                   range(states)]]
    names = ["R", "T"] + [name for group in groups for name in group]
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(step, np.int64)}
    for seed, (a, b) in enumerate(groups):
        feeds[a], feeds[b] = r(3, 4, seed=seed), r(5, seed=seed)
        if seed >= 2:
            feeds[a], feeds[b] = np.abs(feeds[a]), np.abs(feeds[b])
    outputs = [f"new_{name}" for group in [groups[0]] + groups[2:] for name in group]
    node = helper.make_node(op_type, names, outputs, domain=domain, **attributes)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(
        feeds[n].dtype), feeds[n].shape) for n in names]
    graph = helper.make_graph([node], "optimizer", inputs, [
        helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, feeds[n[4:]].shape)
        for n in outputs])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", OPSET), helper.make_opsetid(domain, 1)])
    want = ReferenceEvaluator(model).run(None, feeds)
    got = d5pt.from_onnx(model).inference(feeds)
    for name, expected in zip(outputs, want):
        np.testing.assert_allclose(got[name], expected, rtol=RTOL32, atol=ATOL32,
                                   err_msg=name)


def test_topk_k_out_of_range_is_a_shape_error():
    case = Case("topk_bad", "TopK", {"x": X, "k": i64(9)}, outputs=2)
    model = _model([case.node()], {"x": X, "k": i64(9)}, {}, case.outputs)
    with pytest.raises(Deep500Error, match="K=9"):
        d5pt.from_onnx(model).inference({"x": X, "k": i64(9)})


def test_unique_unsorted_along_an_axis():
    """Columns in order of first occurrence (onnx's reference evaluator does not remove
    duplicates along an axis with sorted=0, so the expectation is written out)."""
    x = np.array([[1, 0, 1, 2], [1, 0, 1, 2]], np.int64)
    case = Case("unique_unsorted_axis", "Unique", {"x": x}, outputs=4, axis=-1, sorted=0)
    model = _model([case.node()], {"x": x}, {}, case.outputs)
    got = d5pt.from_onnx(model).inference({"x": x})
    np.testing.assert_array_equal(got["y0"], [[1, 0, 2], [1, 0, 2]])
    np.testing.assert_array_equal(got["y1"], [0, 1, 3])
    np.testing.assert_array_equal(got["y2"], [0, 1, 0, 2])
    np.testing.assert_array_equal(got["y3"], [2, 1, 1])


def test_deprecated_scatter_is_scatterelements():
    """onnx's reference evaluator has no Scatter (opset 9-10): ScatterElements of the
    same inputs is the expectation."""
    feeds = {"x": X, "i": np.array([[1, 0], [3, 2], [0, -1]], np.int64),
             "u": r(3, 2, seed=4)}
    scatter = Case("scatter", "Scatter", feeds, opset=10, axis=1)
    elements = Case("scatterelements", "ScatterElements", feeds, axis=1)
    model = _model([scatter.node()], feeds, {}, scatter.outputs, scatter.opset)
    want = ReferenceEvaluator(_model([elements.node()], feeds, {}, elements.outputs)).run(
        None, feeds)[0]
    np.testing.assert_array_equal(d5pt.from_onnx(model).inference(feeds)["y0"], want)


FLOAT8 = ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("target", FLOAT8)
@pytest.mark.parametrize("source", [np.float32, np.float16])
def test_cast_to_float8_matches_onnx_reference(source, target, saturate):
    """The tensor-level cast CastLike uses (the executor cannot yet feed or fetch 8-bit
    floats): rounding, saturation, NaN and infinities as onnx's reference evaluator."""
    from deep500.frameworks.pytorch.ops._cast import cast
    x = np.array([0, 1e-9, 0.3, 1.1, -2.7, 0.0137, 300, 447, 449, 460, 464, 465, 500,
                  1e4, 5.9e4, 6e4, -6e4, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([x, r(64) * 50]).astype(source)
    to = getattr(onnx.TensorProto, target)
    node = helper.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", helper.np_dtype_to_tensor_dtype(x.dtype), [len(x)])],
        [helper.make_tensor_value_info("y", to, [len(x)])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0].astype(np.float32)
    dtype = getattr(torch, {"FLOAT8E4M3FN": "float8_e4m3fn",
                            "FLOAT8E4M3FNUZ": "float8_e4m3fnuz",
                            "FLOAT8E5M2": "float8_e5m2",
                            "FLOAT8E5M2FNUZ": "float8_e5m2fnuz"}[target])
    got = cast(torch.from_numpy(x), dtype, bool(saturate)).float().numpy()
    np.testing.assert_array_equal(got, want)  # NaNs compare equal here


# The operator families (deep500/frameworks/families.py) whose operators this file tests,
# beyond the ones test_pytorch_executor.py runs against onnxruntime.
FAMILIES_TESTED_HERE = ("math", "logic", "linalg", "activation", "tensor", "index",
                        "reduction", "quantization", "signal", "training", "ml")


def test_every_operator_of_its_families_is_tested():
    from deep500.frameworks.families import operators_of
    from deep500.frameworks.pytorch.visitor import SUPPORTED_OPERATORS
    from tests.frameworks.test_pytorch_executor import operators_of_cases
    mine = {op.lower() for family in FAMILIES_TESTED_HERE
            for op in operators_of(family)} & set(SUPPORTED_OPERATORS)
    # Scatter: test_deprecated_scatter_is_scatterelements; Gelu:
    # test_pytorch_ops_sequence.py
    # Adagrad, Momentum, Adam: test_optimizer_steps_match_onnx_reference; LabelEncoder
    # (strings): test_pytorch_text.py
    tested = {case.op.lower() for case in CASES} | operators_of_cases() | {
        "scatter", "gelu", "adagrad", "momentum", "adam", "labelencoder"}
    assert mine - tested == set()


def test_matmulinteger_zero_point_per_row():
    """A 1-D a_zero_point of M elements shifts each row of A (onnx's reference evaluator
    broadcasts it along K instead, so the expectation is written out)."""
    a = ints(3, 4, low=0, high=255, dtype=np.uint8)
    b = ints(4, 2, low=0, high=255, dtype=np.uint8, seed=1)
    az, bz = np.array([12, 0, 255], np.uint8), np.array([3, 9], np.uint8)
    feeds = {"a": a, "b": b, "az": az, "bz": bz}
    case = Case("matmulinteger_rows", "MatMulInteger", feeds)
    model = _model([case.node()], feeds, {}, case.outputs)
    want = (a.astype(np.int32) - az.astype(np.int32)[:, None]) @ (
        b.astype(np.int32) - bz.astype(np.int32))
    got = d5pt.from_onnx(model).inference(feeds)["y0"]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
