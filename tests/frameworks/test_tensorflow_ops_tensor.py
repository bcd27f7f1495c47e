"""The TensorFlow executor's elementwise, activation, bitwise, reduction and indexing
operators (``deep500/frameworks/tensorflow/ops/<family>.py``): one-node ONNX models whose
outputs must equal ``onnx.reference.ReferenceEvaluator``'s and Deep500's reference
executor's, and whose gradients (through ``tf.GradientTape``) must equal the reference
executor's backward."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

tf = pytest.importorskip("tensorflow")

import deep500.frameworks.reference as d5ref  # noqa: E402
import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.lv1_network import gradient_name  # noqa: E402
from deep500.utils.errors import UnsupportedError  # noqa: E402

OPSET = onnx.defs.onnx_opset_version()
# Forward: float32 kernels of two libraries differ by a few ulps (transcendental
# functions, reduction orders); float64 and exact types must agree to rounding.
TOL = {np.dtype(np.float32): dict(rtol=2e-5, atol=1e-6),
       np.dtype(np.float16): dict(rtol=2e-3, atol=1e-3),
       np.dtype(np.float64): dict(rtol=1e-11, atol=1e-13)}
# Gradients: two implementations of the same formulas (float64 unless the operator
# allows only float32).
GRAD_TOL = {np.dtype(np.float64): dict(rtol=1e-9, atol=1e-11),
            np.dtype(np.float32): dict(rtol=1e-4, atol=1e-5)}


def _info(name, value):
    value = np.asarray(value)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                         value.shape)


def _names(inputs):
    return ["" if x is None else f"x{i}" for i, x in enumerate(inputs)]


def _node(op_type, names, outputs, attrs):
    """The node of ``op_type`` (``domain:Op`` outside the default domain) and the opsets
    its model imports."""
    domain, _, name = op_type.rpartition(":")
    opsets = [helper.make_opsetid("", OPSET)] + (
        [helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_node(name, names, outputs, domain=domain or None, **attrs), opsets


def oracle(op_type, inputs, attrs, n_outputs):
    """ONNX's ReferenceEvaluator on the one-node model (an independent implementation)."""
    names = _names(inputs)
    node, opsets = _node(op_type, names, [f"y{i}" for i in range(n_outputs)], attrs)
    graph = helper.make_graph(
        [node], "oracle", [_info(n, x) for n, x in zip(names, inputs) if n],
        [helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.UNDEFINED, None)
         for i in range(n_outputs)])
    model = helper.make_model(graph, opset_imports=opsets)
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs) if n}
    return ReferenceEvaluator(model).run(None, feeds)


def one_node(op_type, inputs, attrs, expected, const=(), params=(), loss=False):
    """A model of one ``op_type`` node. Inputs at positions ``const`` are constant
    initializers, at ``params`` trainable ones, the others graph inputs; with ``loss``, a
    scalar ``loss = ReduceSum(y0 · w)`` follows (``w`` a fixed parameter)."""
    names = _names(inputs)
    outputs = [f"y{i}" for i in range(len(expected))]
    node, opsets = _node(op_type, names, outputs, attrs)
    nodes = [node]
    initializers = [numpy_helper.from_array(np.asarray(x), n)
                    for i, (n, x) in enumerate(zip(names, inputs))
                    if n and (i in const or i in params)]
    graph_inputs = [_info(n, x) for i, (n, x) in enumerate(zip(names, inputs))
                    if n and i not in const and i not in params]
    graph_outputs = [helper.make_tensor_value_info(   # rank only: inference fills in
        n, helper.np_dtype_to_tensor_dtype(np.asarray(y).dtype), [None] * np.ndim(y))
        for n, y in zip(outputs, expected)]
    if loss:
        y0 = np.asarray(expected[0])
        w = np.random.default_rng(5).standard_normal(y0.shape).astype(y0.dtype)
        initializers.append(numpy_helper.from_array(w, "w"))
        nodes += [helper.make_node("Mul", ["y0", "w"], ["weighted"]),
                  helper.make_node("ReduceSum", ["weighted"], ["loss"], keepdims=0)]
        graph_outputs.append(helper.make_tensor_value_info(
            "loss", helper.np_dtype_to_tensor_dtype(y0.dtype), []))
    graph = helper.make_graph(nodes, node.op_type.lower(), graph_inputs, graph_outputs,
                              initializers)
    model = helper.make_model(graph, ir_version=10, opset_imports=opsets)
    feeds = {n: np.asarray(x) for i, (n, x) in enumerate(zip(names, inputs))
             if n and i not in const and i not in params}
    return model, feeds


def assert_same(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, err_msg=what, equal_nan=True,
                                   **TOL[want.dtype])
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_forward(op_type, inputs, attrs=None, n_outputs=1, const=(), mode="eager",
                  against_onnx=True, against_reference=True):
    """The TensorFlow executor's outputs equal ONNX's evaluator's and the reference
    executor's (unless told otherwise, where one of them errs or lacks the operator)."""
    attrs = attrs or {}
    expected = oracle(op_type, inputs, attrs, n_outputs)
    model, feeds = one_node(op_type, inputs, attrs, expected, const)
    got = d5tf.from_onnx(model, mode=mode).inference(feeds)
    reference = d5ref.from_onnx(model).inference(feeds) if against_reference else None
    for i, want in enumerate(expected):
        if against_onnx:
            assert_same(got[f"y{i}"], want, f"{op_type} output {i} vs onnx")
        if reference is not None:
            assert_same(got[f"y{i}"], reference[f"y{i}"],
                        f"{op_type} output {i} vs reference")
    return got


def check_gradients_numerically(op_type, inputs, attrs=None, params=(0,), const=(),
                                eps=1e-6):
    """For operators the reference executor lacks: each gradient of ``ReduceSum(y0 · w)``
    (float64) against central differences along a random direction."""
    attrs = attrs or {}
    expected = oracle(op_type, inputs, attrs, 1)
    model, feeds = one_node(op_type, inputs, attrs, expected, const, params, loss=True)
    executor = d5tf.from_onnx(model)
    result = executor.inference_and_backprop(feeds, "loss")
    network = executor.network
    r = np.random.default_rng(9)
    for name in [f"x{i}" for i in params]:
        original = network.fetch_tensor(name).copy()
        direction = r.standard_normal(original.shape)
        values = []
        for sign in (1, -1):
            network.feed_tensor(name, original + sign * eps * direction)
            values.append(float(executor.inference(feeds)["loss"]))
        network.feed_tensor(name, original)
        numeric = (values[0] - values[1]) / (2 * eps)
        analytic = float(np.sum(result[gradient_name(name)] * direction))
        # central differences of a smooth float64 function: error ~ eps² + 1e-16/eps
        assert numeric == pytest.approx(analytic, rel=1e-6, abs=1e-8), (op_type, name)


def check_gradients(op_type, inputs, attrs=None, params=(0,), const=(), n_outputs=1):
    """Gradients of ``ReduceSum(y0 · w)`` w.r.t. the float64 inputs at ``params`` (and
    ``w``) equal the reference executor's."""
    attrs = attrs or {}
    expected = oracle(op_type, inputs, attrs, n_outputs)
    model, feeds = one_node(op_type, inputs, attrs, expected, const, params, loss=True)
    got = d5tf.from_onnx(model).inference_and_backprop(feeds, "loss")
    want = d5ref.from_onnx(model).inference_and_backprop(feeds, "loss")
    tol = GRAD_TOL[np.asarray(want["loss"]).dtype]
    np.testing.assert_allclose(got["loss"], want["loss"], **tol)
    for name in [f"x{i}" for i in params] + ["w"]:
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


# -- unary math and activations -----------------------------------------------------------
UNARY = [  # (operator, attributes, input domain)
    ("Sin", {}, (-3, 3)), ("Cos", {}, (-3, 3)), ("Tan", {}, (-1.2, 1.2)),
    ("Asin", {}, (-0.9, 0.9)), ("Acos", {}, (-0.9, 0.9)), ("Atan", {}, (-3, 3)),
    ("Sinh", {}, (-3, 3)), ("Cosh", {}, (-3, 3)), ("Asinh", {}, (-3, 3)),
    ("Acosh", {}, (1.1, 4)), ("Atanh", {}, (-0.9, 0.9)),
    ("Elu", {}, (-3, 3)), ("Elu", {"alpha": 0.3}, (-3, 3)),
    ("Selu", {}, (-3, 3)), ("Selu", {"alpha": 2.0, "gamma": 0.5}, (-3, 3)),
    ("Celu", {}, (-3, 3)), ("Celu", {"alpha": 2.5}, (-3, 3)),
    ("HardSigmoid", {}, (-4, 4)), ("HardSigmoid", {"alpha": 0.4, "beta": 0.2}, (-4, 4)),
    ("HardSwish", {}, (-5, 5)), ("Softsign", {}, (-3, 3)),
    ("ThresholdedRelu", {}, (-3, 3)), ("ThresholdedRelu", {"alpha": 0.5}, (-3, 3)),
    ("Shrink", {}, (-2, 2)), ("Shrink", {"bias": 0.3, "lambd": 0.8}, (-2, 2)),
    ("Mish", {}, (-4, 4)), ("Swish", {}, (-4, 4)), ("Swish", {"alpha": 0.7}, (-4, 4)),
]


@pytest.mark.parametrize("op_type,attrs,domain", UNARY,
                         ids=[f"{u[0]}-{i}" for i, u in enumerate(UNARY)])
def test_unary_forward_and_gradient(op_type, attrs, domain):
    # Celu is float32 only (the spec); onnx's HardSwish computes with float32 constants.
    float32_only = op_type in ("Celu", "HardSwish")
    dtypes = (np.float32,) if float32_only else (np.float32, np.float64)
    for dtype in dtypes:
        check_forward(op_type, [uniform(*domain, 3, 4, dtype=dtype)], attrs)
    gradient_dtype = np.float32 if op_type == "Celu" else np.float64
    check_gradients(op_type, [uniform(*domain, 3, 4, seed=1, dtype=gradient_dtype)], attrs)


def test_unary_function_mode():
    check_forward("Elu", [uniform(-3, 3, 2, 5, dtype=np.float32)], {"alpha": 0.5},
                  mode="function")


def test_sign_round_isinf_isnan():
    x = np.array([-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 3.7, np.inf, -np.inf, np.nan],
                 np.float32)
    check_forward("Round", [x])
    check_forward("Sign", [x[:-1]])
    check_forward("Sign", [np.array([-3, 0, 4], np.int32)])
    check_forward("IsNaN", [x])
    for negative in (0, 1):
        for positive in (0, 1):
            check_forward("IsInf", [x], {"detect_negative": negative,
                                         "detect_positive": positive})


def test_shrink_on_integers():
    check_forward("Shrink", [np.arange(-4, 5, dtype=np.int32)], {"bias": 1.0, "lambd": 1.5})


def test_prelu_broadcast_slope():
    x, slope = normal(2, 3, 4), uniform(0.1, 0.5, 3, 1, seed=2)
    check_forward("PRelu", [x.astype(np.float32), slope.astype(np.float32)])
    check_gradients("PRelu", [x, slope], params=(0, 1))


# -- integer arithmetic and bits --------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_integers(dtype, fmod):
    signed = np.issubdtype(dtype, np.signedinteger)
    a = np.array([-7, -4, 5, 9, 0, 11] if signed else [7, 4, 5, 9, 0, 11], dtype)
    b = np.array([3, -3, -2, 4, 5, 7] if signed else [3, 3, 2, 4, 5, 7], dtype)
    check_forward("Mod", [a, b], {"fmod": fmod})


def test_mod_floats_and_gradients():
    a, b = uniform(-9, 9, 3, 4), uniform(1, 3, 4, seed=3) * np.array([1, -1, 1, -1])
    for dtype in (np.float16, np.float32, np.float64):
        check_forward("Mod", [a.astype(dtype), b.astype(dtype)], {"fmod": 1})
    check_forward("Mod", [a, b], {"fmod": 0})
    check_gradients("Mod", [a, b], {"fmod": 1}, params=(0, 1))
    check_gradients("Mod", [a, b], {"fmod": 0}, params=(0, 1))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.int8, np.int32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(dtype, direction):
    x = np.array([1, 7, 16, 100], dtype)
    bits = np.dtype(dtype).itemsize * 8
    shifts = np.array([0, 2, 3, bits + 1 if np.dtype(dtype).kind == "u" else 1], dtype)
    check_forward("BitShift", [x, shifts], {"direction": direction})


def test_bitshift_bad_direction():
    expected = [np.zeros(2, np.uint8)]
    model, feeds = one_node("BitShift", [np.ones(2, np.uint8), np.ones(2, np.uint8)],
                            {"direction": "UP"}, expected)
    with pytest.raises(UnsupportedError, match="direction"):
        d5tf.from_onnx(model).inference(feeds)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint64])
def test_bitwise(dtype):
    r = np.random.default_rng(0)
    a = r.integers(0, 100, (3, 4)).astype(dtype)
    b = r.integers(0, 100, (4,)).astype(dtype)
    for op_type in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        check_forward(op_type, [a, b])
    check_forward("BitwiseNot", [a])


# -- reductions ---------------------------------------------------------------------------
REDUCE = ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd",
          "ReduceSumSquare"]


@pytest.mark.parametrize("op_type", REDUCE)
def test_reductions(op_type):
    x = uniform(0.5, 2.0, 2, 3, 4)
    for dtype in (np.float32, np.float64):
        for axes, keepdims in (([1], 1), ([0, 2], 0), ([-1], 1), (None, 0), (None, 1)):
            inputs = [x.astype(dtype)] + ([] if axes is None else [i64(axes)])
            check_forward(op_type, inputs, {"keepdims": keepdims}, const=(1,))
    signed = x - (0.25 if op_type == "ReduceLogSum" else 1)   # negatives where defined
    for noop in (0, 1):
        empty = np.zeros(0, np.int64)
        check_forward(op_type, [x, empty], {"noop_with_empty_axes": noop}, const=(1,))
        check_forward(op_type, [signed, empty], {"noop_with_empty_axes": noop})  # fed axes
        check_forward(op_type, [signed], {"noop_with_empty_axes": noop, "keepdims": 0})
    check_gradients(op_type, [x, np.zeros(0, np.int64)], {"noop_with_empty_axes": 1},
                    const=(1,))
    check_gradients(op_type, [x, i64([0, 2])], {"keepdims": 1}, const=(1,))
    check_gradients(op_type, [x], {"keepdims": 0})


def test_reductions_on_integers():
    x = np.random.default_rng(0).integers(1, 5, (3, 4)).astype(np.int64)
    for op_type in ("ReduceL1", "ReduceProd", "ReduceSumSquare"):
        check_forward(op_type, [x, i64([1])], {"keepdims": 0}, const=(1,))


def test_reduction_with_axes_fed_at_run_time():
    x = uniform(0.5, 2.0, 2, 3, 4, dtype=np.float32)
    check_forward("ReduceL2", [x, i64([2])], {"keepdims": 0})


# -- argmax, argmin, hardmax, topk ----------------------------------------------------------
@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
def test_arg_extremes_with_ties(op_type):
    x = np.array([[[2, 5, 5, 1], [7, 7, 0, 0], [3, 1, 3, 1]]], np.float32)   # ties
    for axis in (0, 1, 2, -1):
        for keepdims in (0, 1):
            for last in (0, 1):
                check_forward(op_type, [x], {"axis": axis, "keepdims": keepdims,
                                             "select_last_index": last})
    check_forward(op_type, [x.astype(np.int32)], {"axis": 1})


def test_hardmax():
    x = np.array([[3, 1, 3, 0], [0, 2, 1, 2], [-1, -1, -1, -1]], np.float32)
    for axis in (0, 1, -1):
        check_forward("Hardmax", [x], {"axis": axis})
    check_forward("Hardmax", [normal(2, 3, 4)], {"axis": 1})


def test_topk():
    x = np.array([[4, 1, 4, 3, 0], [2, 2, 2, 9, 1]], np.float32)   # ties: lower index
    for axis in (1, -1, 0):
        for largest in (0, 1):
            k = 2 if axis != 0 else 1
            check_forward("TopK", [x, i64([k])], {"axis": axis, "largest": largest},
                          n_outputs=2, const=(1,))
    check_forward("TopK", [np.array([5, 3, 8, 1], np.int64), i64([3])], {"largest": 0},
                  n_outputs=2, const=(1,))
    check_gradients("TopK", [normal(3, 5), i64([2])], {"axis": 1}, const=(1,), n_outputs=2)


# -- cumulative -------------------------------------------------------------------------------
@pytest.mark.parametrize("op_type", ["CumSum", "CumProd"])
def test_cumulative(op_type):
    x = uniform(0.5, 1.5, 2, 3)
    for axis in (0, 1, -1):
        for exclusive in (0, 1):
            for reverse in (0, 1):
                attrs = {"exclusive": exclusive, "reverse": reverse}
                check_forward(op_type, [x.astype(np.float32), i64(axis)], attrs, const=(1,))
    check_forward(op_type, [np.arange(1, 7, dtype=np.int32), i64(0)], {}, const=(1,))
    check_gradients(op_type, [x, i64(1)], {"exclusive": 1, "reverse": 1}, const=(1,))
    check_gradients(op_type, [x, i64(0)], {}, const=(1,))


# -- matrices ---------------------------------------------------------------------------------
def test_trilu():
    x = normal(2, 3, 5)
    for upper in (0, 1):
        for k in (None, -1, 0, 2, 7, -7):
            inputs = [x.astype(np.float32)] + ([] if k is None else [i64(k)])
            check_forward("Trilu", inputs, {"upper": upper}, const=(1,))
        check_gradients("Trilu", [x, i64(1)], {"upper": upper}, const=(1,))
    check_forward("Trilu", [np.arange(12, dtype=np.int64).reshape(4, 3)], {"upper": 0})


def test_eyelike():
    x = np.zeros((3, 5), np.float32)
    for k in (0, 2, -1, 6):
        check_forward("EyeLike", [x], {"k": k})
    check_forward("EyeLike", [x], {"dtype": onnx.TensorProto.INT32})


def test_det():
    x = normal(2, 3, 3) + 2 * np.eye(3)
    check_forward("Det", [x.astype(np.float32)])
    check_forward("Det", [x[0]])
    check_gradients("Det", [x])


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("ii", [(3, 3)]),
    ("...ij->...ji", [(2, 3, 4)]), ("bij, bjk -> bik", [(2, 3, 4), (2, 4, 2)]),
    ("i,i", [(5,), (5,)])])
def test_einsum(equation, shapes):
    inputs = [normal(*s, seed=i) for i, s in enumerate(shapes)]
    check_forward("Einsum", [x.astype(np.float32) for x in inputs], {"equation": equation})
    check_gradients("Einsum", inputs, {"equation": equation},
                    params=tuple(range(len(inputs))))


# -- indexing ---------------------------------------------------------------------------------
def test_tile():
    x = normal(2, 3)
    check_forward("Tile", [x.astype(np.float32), i64([2, 3])], const=(1,))
    check_forward("Tile", [np.arange(3, dtype=np.int32), i64([4])])
    check_gradients("Tile", [x, i64([3, 1])], const=(1,))


def test_onehot():
    indices = np.array([[0, 3, -1], [2, -4, 1]], np.int64)
    values = np.array([-2.0, 5.0], np.float32)
    for axis in (-1, 0, 1, 2, -2):
        check_forward("OneHot", [indices, np.array(4, np.int64), values], {"axis": axis})
    check_forward("OneHot", [indices.astype(np.float32), np.array(4.0, np.float32),
                             np.array([0, 1], np.int32)])


def test_gathernd():
    data = normal(2, 3, 4)
    cases = [(np.array([[0, 1], [1, -1]], np.int64), 0),
             (np.array([[[1], [0]], [[1], [1]]], np.int64), 0),
             (np.array([[2, 3], [0, -4]], np.int64), 1),
             (np.array([[1], [2]], np.int64), 1)]
    for indices, batch_dims in cases:
        check_forward("GatherND", [data.astype(np.float32), indices],
                      {"batch_dims": batch_dims}, const=(1,))
        check_gradients("GatherND", [data, indices], {"batch_dims": batch_dims},
                        const=(1,))


REDUCTIONS = ["none", "add", "mul", "max", "min"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatternd(reduction):
    data = normal(4, 3)
    unique = np.array([[0], [-1]], np.int64)
    repeated = np.array([[1], [3], [1]], np.int64)
    indices = unique if reduction == "none" else repeated
    updates = normal(len(indices), 3, seed=4)
    attrs = {"reduction": reduction}
    check_forward("ScatterND", [data.astype(np.float32), indices, updates.astype(np.float32)],
                  attrs, const=(1,))
    check_forward("ScatterND", [normal(3, 2, 2), np.array([[0, 1], [2, 0]], np.int64),
                                normal(2, 2, seed=6)], attrs, const=(1,))
    if reduction in ("none", "add", "mul"):
        check_gradients("ScatterND", [data, indices, updates], attrs, params=(0, 2),
                        const=(1,))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatterelements(reduction):
    data = normal(3, 4)
    attrs = {"reduction": reduction}
    for axis in (0, 1, -1):
        size = data.shape[axis]
        if reduction == "none":   # distinct targets along the axis
            indices = np.array([[0, size - 1], [1, -size]], np.int64)
        else:
            indices = np.array([[0, 1], [1, 1]], np.int64)
        updates = normal(2, 2, seed=7)
        check_forward("ScatterElements", [data.astype(np.float32), indices,
                                          updates.astype(np.float32)],
                      {**attrs, "axis": axis}, const=(1,))
        if reduction in ("none", "add", "mul"):
            check_gradients("ScatterElements", [data, indices, updates],
                            {**attrs, "axis": axis}, params=(0, 2), const=(1,))


def test_compress():
    x = normal(3, 4)
    for condition, axis in (([1, 0, 1], 0), ([0, 1, 1, 0], 1), ([1, 0], -1),
                            ([0, 1, 0, 0, 1], None)):
        attrs = {} if axis is None else {"axis": axis}
        check_forward("Compress", [x.astype(np.float32), np.array(condition, bool)], attrs)
        check_gradients("Compress", [x, np.array(condition, bool)], attrs, const=(1,))


def test_nonzero():
    check_forward("NonZero", [np.array([[1, 0, 3], [0, 0, 2]], np.float32)])
    check_forward("NonZero", [np.array([[True, False], [False, True]])])
    check_forward("NonZero", [np.zeros((2, 2), np.int32)])


def test_unique():
    x = np.array([2, 1, 1, 3, 4, 3, 1], np.float32)
    for keep_sorted in (0, 1):
        check_forward("Unique", [x], {"sorted": keep_sorted}, n_outputs=4)
    rows = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [0, 5, 1], [2, 3, 4]], np.int64)
    for axis in (0, 1, -1):
        for keep_sorted in (0, 1):
            # onnx's evaluator takes first occurrences along axis 0 whatever the axis
            check_forward("Unique", [rows], {"axis": axis, "sorted": keep_sorted},
                          n_outputs=4, against_onnx=keep_sorted or axis == 0)
    check_forward("Unique", [rows[:, [1, 0, 1]]], {"axis": 1, "sorted": 0}, n_outputs=4,
                  against_onnx=False)


# -- operators of recent opsets (the reference executor lacks them) ----------------------------
def test_xor():
    r = np.random.default_rng(0)
    check_forward("Xor", [r.integers(0, 2, (3, 4)).astype(bool),
                          r.integers(0, 2, (4,)).astype(bool)])


def test_swiglu():
    a, b = normal(3, 4), normal(3, 4, seed=1)
    for alpha in (1.0, 1.702):
        check_forward("SwiGLU", [a.astype(np.float32), b.astype(np.float32)],
                      {"alpha": alpha}, against_reference=False)
        check_forward("SwiGLU", [a, b], {"alpha": alpha}, against_reference=False)
    check_gradients_numerically("SwiGLU", [a, b], {"alpha": 1.702}, params=(0, 1))


def test_bitcast():
    x = np.array([1.0, -2.5, np.inf], np.float32)
    check_forward("BitCast", [x], {"to": onnx.TensorProto.INT32}, against_reference=False)
    check_forward("BitCast", [x.view(np.uint32)], {"to": onnx.TensorProto.FLOAT},
                  against_reference=False)
    check_forward("BitCast", [np.array([-1, 7], np.int64)], {"to": onnx.TensorProto.DOUBLE},
                  against_reference=False)
    check_forward("BitCast", [np.array([True, False])], {"to": onnx.TensorProto.UINT8},
                  against_reference=False)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensorscatter(mode):
    cache, update = normal(2, 3, 5, 4), normal(2, 3, 2, 4, seed=1)
    write = np.array([1, 4 if mode == "circular" else 3], np.int64)
    attrs = {"mode": mode}
    check_forward("TensorScatter", [cache.astype(np.float32), update.astype(np.float32),
                                    write], attrs, against_reference=False)
    check_forward("TensorScatter", [cache, update], attrs, against_reference=False)
    check_forward("TensorScatter", [normal(2, 5, 3), normal(2, 2, 3, seed=2), write],
                  {**attrs, "axis": 1}, against_reference=False)
    check_gradients_numerically("TensorScatter", [cache, update, write], attrs,
                                params=(0, 1), const=(2,))


def test_reverse_sequence():
    x = normal(4, 3, 2)
    lengths = np.array([4, 1, 3], np.int64)
    check_forward("ReverseSequence", [x.astype(np.float32), lengths],
                  {"batch_axis": 1, "time_axis": 0})
    check_forward("ReverseSequence", [np.swapaxes(x, 0, 1), lengths],
                  {"batch_axis": 0, "time_axis": 1})
    check_gradients("ReverseSequence", [x, lengths], {"batch_axis": 1, "time_axis": 0},
                    const=(1,))


def test_deprecated_scatter():
    data, updates = normal(3, 3), normal(2, 3, seed=1)
    indices = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    expected = [oracle("ScatterElements", [data, indices, updates], {"axis": 0}, 1)[0]]
    names = ["x0", "x1", "x2"]
    node = helper.make_node("Scatter", names, ["y0"], axis=0)
    graph = helper.make_graph([node], "scatter", [_info(n, v) for n, v in
                                                   zip(names, [data, indices, updates])],
                              [_info("y0", expected[0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    feeds = dict(zip(names, [data, indices, updates]))
    assert_same(d5tf.from_onnx(model).inference(feeds)["y0"], expected[0], "Scatter")


# -- quantization, windows, spectra, detection (vs onnx's evaluator) --------------------------
def onnx_only(op_type, inputs, attrs=None, n_outputs=1, const=()):
    return check_forward(op_type, inputs, attrs, n_outputs, const, against_reference=False)


def test_quantize_and_dequantize():
    x = uniform(-3, 3, 2, 3, 4, dtype=np.float32)
    x[0, 0, :2] = [0.25, 0.75]                         # ties of x / scale: to even
    for zero_dtype in (np.uint8, np.int8, np.int16, np.uint16):
        zero = np.array(3, zero_dtype)
        onnx_only("QuantizeLinear", [x, np.array(0.5, np.float32), zero])
        q = np.random.default_rng(1).integers(0, 100, (2, 3, 4)).astype(zero_dtype)
        onnx_only("DequantizeLinear", [q, np.array(0.5, np.float32), zero])
    onnx_only("QuantizeLinear", [x, np.array(0.02, np.float32)])          # uint8, saturating
    per_axis = np.array([0.5, 0.25, 1.0], np.float32)
    onnx_only("QuantizeLinear", [x, per_axis, np.array([1, 2, 3], np.int8)], {"axis": 1})
    blocked = uniform(0.1, 1, 2, 3, 2, dtype=np.float32)
    onnx_only("QuantizeLinear", [x, blocked, np.zeros((2, 3, 2), np.int8)],
              {"axis": 2, "block_size": 2})
    q = np.random.default_rng(2).integers(-50, 50, (2, 3, 4)).astype(np.int8)
    onnx_only("DequantizeLinear", [q, per_axis, np.array([1, 2, 3], np.int8)], {"axis": 1})
    onnx_only("DequantizeLinear", [q, blocked, np.ones((2, 3, 2), np.int8)],
              {"axis": -1, "block_size": 2})
    onnx_only("DequantizeLinear", [q.astype(np.int32), np.array(0.1, np.float32)])
    onnx_only("DequantizeLinear", [q, np.array(0.5, np.float16)])


def test_dynamic_quantize_and_integer_products():
    for x in (uniform(-2, 5, 3, 4, dtype=np.float32), uniform(1, 5, 3, 4, dtype=np.float32)):
        onnx_only("DynamicQuantizeLinear", [x], n_outputs=3)
    r = np.random.default_rng(0)
    a, b = r.integers(0, 255, (2, 3, 4)).astype(np.uint8), r.integers(0, 255, (4, 5)).astype(
        np.uint8)
    onnx_only("MatMulInteger", [a[0], b, np.array(12, np.uint8), np.array(30, np.uint8)])
    for scale_dtype in (np.float32, np.float16):
        scales = [np.array(s, scale_dtype) for s in (0.02, 0.01, 0.5)]
        onnx_only("QLinearMatMul", [a, scales[0], np.array(10, np.uint8), b, scales[1],
                                    np.array(20, np.uint8), scales[2],
                                    np.array(100, np.uint8)])
        signed = [r.integers(-100, 100, s).astype(np.int8) for s in ((3, 4), (4, 2))]
        onnx_only("QLinearMatMul", [signed[0], scales[0], np.array(1, np.int8), signed[1],
                                    scales[1], np.array(-2, np.int8), scales[2],
                                    np.array(5, np.int8)])


@pytest.mark.parametrize("op_type", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_windows(op_type):
    for periodic in (0, 1):
        for dtype in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
            onnx_only(op_type, [np.array(10, np.int64)],
                      {"periodic": periodic, "output_datatype": dtype})


def test_dft():
    real = normal(2, 8, 3, 1, dtype=np.float32)
    complex_ = normal(2, 8, 3, 2, dtype=np.float32)
    for x in (real, complex_):
        for inverse in (0, 1):
            for axis in (1, -2):
                onnx_only("DFT", [x, None, np.array(axis, np.int64)], {"inverse": inverse},
                          const=(2,))
    onnx_only("DFT", [real, np.array(5, np.int64), np.array(1, np.int64)], const=(1, 2))
    onnx_only("DFT", [real, np.array(12, np.int64), np.array(1, np.int64)],
              {"onesided": 1}, const=(1, 2))
    spectrum = onnx_only("DFT", [real, None, np.array(1, np.int64)], {"onesided": 1},
                         const=(2,))["y0"]
    onnx_only("DFT", [spectrum, None, np.array(1, np.int64)], {"onesided": 1, "inverse": 1},
              const=(2,))


def test_nonmaxsuppression():
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11],
                       [0, 10.1, 1, 11.1], [0, 100, 1, 101]]], np.float32)
    scores = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]],
                      np.float32)
    limit, iou, threshold = np.array([3], np.int64), np.array([0.5], np.float32), np.array(
        [0.35], np.float32)
    onnx_only("NonMaxSuppression", [boxes, scores, limit, iou], const=(2,))
    onnx_only("NonMaxSuppression", [boxes, scores, limit, iou, threshold], const=(2,))
    onnx_only("NonMaxSuppression", [boxes, scores, np.array([0], np.int64), iou], const=(2,))
    centers = np.concatenate([(boxes[..., :2] + boxes[..., 2:]) / 2,
                              boxes[..., 2:] - boxes[..., :2]], axis=-1)[..., [1, 0, 3, 2]]
    onnx_only("NonMaxSuppression", [centers, scores, limit, iou], {"center_point_box": 1},
              const=(2,))
    onnx_only("NonMaxSuppression", [np.concatenate([boxes, boxes[:, ::-1]]),
                                    np.concatenate([scores, scores]), limit, iou],
              const=(2,))


def test_space_depth_rearrangements():
    x = normal(2, 8, 4, 6)
    for mode in ("DCR", "CRD"):
        for op_type in ("SpaceToDepth", "DepthToSpace"):
            attrs = {"blocksize": 2, "mode": mode}
            check_forward(op_type, [x.astype(np.float32)], attrs)
            check_gradients(op_type, [x], attrs)


def test_stft():
    signal = normal(2, 32, 1, dtype=np.float32)
    window = np.hanning(8).astype(np.float32)
    onnx_only("STFT", [signal, np.array(4, np.int64), window], const=(1,))
    onnx_only("STFT", [signal, np.array(3, np.int64), None, np.array(8, np.int64)],
              const=(1, 3))
    onnx_only("STFT", [normal(1, 20, 2, dtype=np.float32), np.array(5, np.int64), None,
                       np.array(6, np.int64)], {"onesided": 0}, const=(1, 3))


def test_ml_binarizer_and_array_feature_extractor():
    x = normal(3, 5, dtype=np.float32)
    onnx_only("ai.onnx.ml:Binarizer", [x], {"threshold": 0.2})
    onnx_only("ai.onnx.ml:ArrayFeatureExtractor", [x, np.array([4, 0, 2], np.int64)])
    onnx_only("ai.onnx.ml:ArrayFeatureExtractor", [x[0], np.array([[1, 3]], np.int64)])


TRAINING = "ai.onnx.preview.training:"


def test_training_optimizer_steps():
    x, g = normal(3, 4), normal(3, 4, seed=1)
    x2, g2 = normal(5), normal(5, seed=2)
    state = [np.abs(normal(3, 4, seed=3)), np.abs(normal(5, seed=4))]
    rate = np.array(0.1, np.float64)
    for step in (0, 3):
        t = np.array(step, np.int64)
        onnx_only(TRAINING + "Adagrad", [rate, t, x, x2, g, g2, *state],
                  {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01},
                  n_outputs=4)
        for mode in ("standard", "nesterov"):
            onnx_only(TRAINING + "Momentum", [rate, t, x, g, state[0]],
                      {"alpha": 0.9, "beta": 0.5, "mode": mode, "norm_coefficient": 0.02},
                      n_outputs=2)
        onnx_only(TRAINING + "Adam", [rate, t, x, g, state[0], np.square(state[0])],
                  {"alpha": 0.875, "beta": 255 / 256, "epsilon": 2.0 ** -23,
                   "norm_coefficient": 2.0 ** -7, "norm_coefficient_post": 2.0 ** -6},
                  n_outputs=3)   # attributes are float32: values it holds exactly


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_vectorizer(mode):
    x = np.array([[1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], [8, 8, 5, 6, 7, 7, 1, 3, 5, 6, 6, 7]],
                 np.int32)
    pool = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 3, 3]       # 4 unigrams, then 4 bigrams
    attrs = {"mode": mode, "ngram_counts": [0, 4], "ngram_indexes": [0, 1, 2, 3, 4, 5, 6, 2],
             "pool_int64s": pool, "weights": [0.5, 1.0, 2.0, 1.5, 0.25, 3.0, 1.0]}
    for shortest, longest, skips in ((1, 1, 0), (2, 2, 0), (1, 2, 0), (2, 2, 3), (1, 2, 2)):
        lengths = {"min_gram_length": shortest, "max_gram_length": longest,
                   "max_skip_count": skips}
        onnx_only("TfIdfVectorizer", [x], {**attrs, **lengths})
        onnx_only("TfIdfVectorizer", [x[1].astype(np.int64)], {**attrs, **lengths})
        if mode == "TF":   # onnx's evaluator needs weights for IDF and TFIDF
            unweighted = {k: v for k, v in attrs.items() if k != "weights"}
            onnx_only("TfIdfVectorizer", [x], {**unweighted, **lengths})


FUNCTION_MODE = [   # (operator, inputs, attributes, outputs, constant inputs, vs reference)
    ("TopK", [normal(3, 5, dtype=np.float32), i64([2])], {"axis": 0}, 2, (1,), True),
    ("CumSum", [normal(3, 5, dtype=np.float32), i64(1)], {"reverse": 1}, 1, (1,), True),
    ("Trilu", [normal(3, 5, dtype=np.float32), i64(1)], {}, 1, (), True),
    ("ArgMin", [normal(3, 5, dtype=np.float32)], {"axis": 1, "keepdims": 0}, 1, (), True),
    ("ReduceLogSumExp", [normal(3, 5, dtype=np.float32), i64([1])], {}, 1, (), True),
    ("ScatterND", [normal(4, 3, dtype=np.float32), np.array([[1], [3], [1]], np.int64),
                   normal(3, 3, dtype=np.float32)], {"reduction": "mul"}, 1, (), True),
    ("ScatterElements", [normal(3, 4, dtype=np.float32), np.array([[0, 1]], np.int64),
                         normal(1, 2, dtype=np.float32)], {"axis": 1}, 1, (), True),
    ("GatherND", [normal(2, 3, 4, dtype=np.float32), np.array([[2, -1], [0, 0]], np.int64)],
     {"batch_dims": 1}, 1, (), True),
    ("Unique", [np.array([3, 1, 3, 2, 1], np.int64)], {"sorted": 0}, 4, (), True),
    ("Compress", [normal(3, 4, dtype=np.float32), np.array([1, 0, 1], bool)], {"axis": 0},
     1, (), True),
    ("NonZero", [np.array([[1, 0], [0, 3]], np.float32)], {}, 1, (), True),
    ("OneHot", [np.array([0, 2, -1], np.int64), np.array(3, np.int64),
                np.array([0, 1], np.float32)], {}, 1, (), True),
    ("Einsum", [normal(2, 3, dtype=np.float32), normal(3, 4, dtype=np.float32)],
     {"equation": "ij,jk->ik"}, 1, (), True),
    ("Tile", [normal(2, 3, dtype=np.float32), i64([2, 1])], {}, 1, (), True),
    ("Hardmax", [normal(2, 3, dtype=np.float32)], {"axis": 0}, 1, (), True),
    ("Mod", [np.array([7, -7], np.int32), np.array([3, 3], np.int32)], {"fmod": 1}, 1, (),
     True),
    ("DFT", [normal(1, 8, 1, dtype=np.float32), None, i64(1)], {"onesided": 1}, 1, (2,),
     False),
    ("STFT", [normal(1, 16, 1, dtype=np.float32), i64(4), None, i64(8)], {}, 1, (), False),
    ("NonMaxSuppression", [np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1]]], np.float32),
                           np.array([[[0.9, 0.8]]], np.float32), i64([2]),
                           np.array([0.5], np.float32)], {}, 1, (), False),
    ("TfIdfVectorizer", [np.array([1, 2, 1, 2], np.int64)],
     {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 1,
      "ngram_counts": [0, 2], "ngram_indexes": [0, 1, 2], "pool_int64s": [1, 2, 1, 2]},
     1, (), False),
    ("DynamicQuantizeLinear", [normal(3, 4, dtype=np.float32)], {}, 3, (), False),
    ("TensorScatter", [normal(2, 5, 3, dtype=np.float32), normal(2, 2, 3, dtype=np.float32),
                       np.array([1, 3], np.int64)], {"mode": "circular", "axis": 1}, 1, (),
     False),
]


@pytest.mark.parametrize("case", FUNCTION_MODE, ids=[c[0] for c in FUNCTION_MODE])
def test_traced_function_mode(case):
    """The same closures traced into a tf.function (inputs that decide shapes, such as
    axes and k, are graph inputs here unless constant)."""
    op_type, inputs, attrs, n_outputs, const, with_reference = case
    check_forward(op_type, inputs, attrs, n_outputs, const, mode="function",
                  against_reference=with_reference)


def test_integer_convolutions():
    r = np.random.default_rng(0)
    x = r.integers(0, 255, (1, 4, 7, 6)).astype(np.uint8)
    w = r.integers(0, 255, (6, 2, 3, 2)).astype(np.uint8)
    for attrs in ({"group": 2}, {"group": 2, "pads": [1, 0, 1, 1], "strides": [2, 1]},
                  {"group": 2, "dilations": [2, 1], "auto_pad": "SAME_UPPER"}):
        onnx_only("ConvInteger", [x, w, np.array(100, np.uint8), np.array(120, np.uint8)],
                  attrs)
    onnx_only("ConvInteger", [x[:, :2], w], {})
    signed = r.integers(-60, 60, (3, 4, 3, 3)).astype(np.int8)
    bias = r.integers(-500, 500, 3).astype(np.int32)
    for w_scale in (np.array(0.01, np.float32), np.array([0.01, 0.02, 0.005], np.float32)):
        zero = np.zeros(w_scale.shape, np.int8)
        onnx_only("QLinearConv", [x, np.array(0.05, np.float32), np.array(128, np.uint8),
                                  signed, w_scale, zero, np.array(0.8, np.float32),
                                  np.array(90, np.uint8), bias], {"pads": [1, 1, 1, 1]})


def test_roialign():
    x = normal(2, 3, 10, 8)
    rois = np.array([[0, 0, 7, 9], [1.5, 2.2, 5.1, 6.4], [-2, -1, 3, 2], [6, 8, 12, 13]],
                    np.float64)
    batch = np.array([0, 1, 1, 0], np.int64)
    for mode in ("avg", "max"):
        for transform in ("half_pixel", "output_half_pixel"):
            for ratio, scale in ((0, 1.0), (2, 0.5)):
                attrs = {"mode": mode, "coordinate_transformation_mode": transform,
                         "output_height": 3, "output_width": 2, "sampling_ratio": ratio,
                         "spatial_scale": scale}
                onnx_only("RoiAlign", [x.astype(np.float32), rois.astype(np.float32), batch],
                          attrs)
    check_gradients_numerically("RoiAlign", [x, rois, batch],
                                {"output_height": 2, "output_width": 2}, const=(1, 2))


def test_melweightmatrix():
    for bins, length, rate, low, high in ((8, 16, 8192, 0.0, 4096.0), (5, 64, 16000, 50.0,
                                                                         6000.0),
                                          (10, 32, 16000, 300.0, 7600.0)):
        onnx_only("MelWeightMatrix", [np.array(bins, np.int64), np.array(length, np.int64),
                                      np.array(rate, np.int64), np.array(low, np.float32),
                                      np.array(high, np.float32)])
    onnx_only("MelWeightMatrix", [np.array(4, np.int32), np.array(20, np.int32),
                                  np.array(8000, np.int32), np.array(0, np.float32),
                                  np.array(4000, np.float32)],
              {"output_datatype": onnx.TensorProto.DOUBLE})
