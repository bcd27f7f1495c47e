"""Indexing and shape operators (ArgMax, TopK, Gather*/Scatter*, CumSum, Einsum, Trilu,
Tile, OneHot, Unique, Det, ...) against onnx's ReferenceEvaluator; backward against
finite differences (float64) and, where PyTorch has the operator, against its autograd."""
import numpy as np
import pytest

import deep500.frameworks.reference as d5ref
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_backward, check_gradient, torch

I64 = np.int64
FLOATS = [np.float32, np.float64]
# Two float implementations of the same formula (einsum, det, cumulative sums) may round
# differently; exact selections (gathers, scatters) are compared exactly.
TOL = {np.float32: dict(rtol=2e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def rand(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def ints(values):
    return np.array(values, I64)


# (id, op_type, inputs(dtype), attributes, outputs)
CASES = [
    ("argmax", "ArgMax", lambda t: [rand((3, 4, 2), t)], {"axis": 1}, 1),
    ("argmax_last_ties", "ArgMax", lambda t: [np.array([[1, 3, 3], [2, 2, 0]], t)],
     {"axis": 1, "keepdims": 0, "select_last_index": 1}, 1),
    ("argmin_neg_axis", "ArgMin", lambda t: [rand((3, 4), t)], {"axis": -2, "keepdims": 0}, 1),
    ("argmin_ties", "ArgMin", lambda t: [np.array([[1, 0, 0], [2, 2, 2]], t)], {"axis": 1}, 1),
    ("argmin_last", "ArgMin", lambda t: [np.array([[1, 0, 0], [2, 2, 2]], t)],
     {"axis": 1, "select_last_index": 1}, 1),
    ("hardmax", "Hardmax", lambda t: [rand((2, 3, 4), t)], {}, 1),
    ("hardmax_axis0_ties", "Hardmax", lambda t: [np.array([[1, 2], [1, 0]], t)],
     {"axis": 0}, 1),
    ("topk", "TopK", lambda t: [rand((3, 5), t), ints([3])], {}, 2),
    ("topk_smallest_axis0", "TopK", lambda t: [rand((5, 3), t), ints([2])],
     {"axis": 0, "largest": 0}, 2),
    ("topk_ties", "TopK", lambda t: [np.array([[3, 1, 3, 2, 1]], t), ints([4])], {}, 2),
    ("topk_ties_smallest", "TopK", lambda t: [np.array([[3, 1, 3, 2, 1]], t), ints([4])],
     {"largest": 0}, 2),
    ("gather_elements", "GatherElements",
     lambda t: [rand((3, 4), t), ints([[0, -1, 2], [1, 1, 0], [3, 0, 0]])], {"axis": 1}, 1),
    ("gather_elements_axis0", "GatherElements",
     lambda t: [rand((3, 2), t), ints([[2, 0], [2, 2], [0, 1], [1, 0]])], {}, 1),
    ("gathernd", "GatherND", lambda t: [rand((3, 4, 2), t), ints([[0, 1], [2, -1]])], {}, 1),
    ("gathernd_full", "GatherND", lambda t: [rand((3, 4), t), ints([[[0, 1]], [[2, 3]]])],
     {}, 1),
    ("gathernd_batch", "GatherND", lambda t: [rand((2, 3, 4), t), ints([[[1], [0]], [[2], [2]]])],
     {"batch_dims": 1}, 1),
    ("scatternd", "ScatterND", lambda t: [rand((4, 3), t), ints([[1], [3]]), rand((2, 3), t, 1)],
     {}, 1),
    ("scatternd_add", "ScatterND",
     lambda t: [rand((4, 3), t), ints([[1, 0], [1, 0], [2, 2]]), rand((3,), t, 1)],
     {"reduction": "add"}, 1),
    ("scatternd_mul", "ScatterND",
     lambda t: [rand((4, 3), t), ints([[1], [1], [-1]]), rand((3, 3), t, 1)],
     {"reduction": "mul"}, 1),
    ("scatternd_max", "ScatterND",
     lambda t: [rand((4, 3), t), ints([[0], [0], [2]]), rand((3, 3), t, 1)],
     {"reduction": "max"}, 1),
    ("scatternd_min", "ScatterND",
     lambda t: [rand((4, 3), t), ints([[0], [2], [0]]), rand((3, 3), t, 1)],
     {"reduction": "min"}, 1),
    ("scatter_elements", "ScatterElements",
     lambda t: [rand((3, 4), t), ints([[1, 3], [0, -2]]), rand((2, 2), t, 1)], {"axis": 1}, 1),
    ("scatter_elements_add", "ScatterElements",
     lambda t: [rand((3, 4), t), ints([[1, 1], [1, 1]]), rand((2, 2), t, 1)],
     {"reduction": "add"}, 1),
    ("scatter_elements_mul", "ScatterElements",
     lambda t: [rand((3, 4), t), ints([[1, 1], [0, 1]]), rand((2, 2), t, 1)],
     {"reduction": "mul"}, 1),
    ("scatter_elements_max", "ScatterElements",
     lambda t: [rand((3, 4), t), ints([[2, 1], [2, 1]]), rand((2, 2), t, 1)],
     {"axis": 0, "reduction": "max"}, 1),
    ("cumsum", "CumSum", lambda t: [rand((3, 4), t), ints(1)], {}, 1),
    ("cumsum_exclusive_reverse", "CumSum", lambda t: [rand((3, 4), t), ints(-2)],
     {"exclusive": 1, "reverse": 1}, 1),
    ("cumsum_exclusive", "CumSum", lambda t: [rand((5,), t), np.array(0, np.int32)],
     {"exclusive": 1}, 1),
    ("cumprod_reverse", "CumProd", lambda t: [rand((3, 4), t), ints(1)], {"reverse": 1}, 1),
    ("cumprod_exclusive", "CumProd", lambda t: [rand((4, 3), t), ints(0)], {"exclusive": 1}, 1),
    ("trilu_upper", "Trilu", lambda t: [rand((2, 3, 4), t)], {}, 1),
    ("trilu_lower_k", "Trilu", lambda t: [rand((4, 3), t), ints(-1)], {"upper": 0}, 1),
    ("trilu_upper_k", "Trilu", lambda t: [rand((3, 5), t), ints(2)], {}, 1),
    ("tile", "Tile", lambda t: [rand((2, 3), t), ints([2, 3])], {}, 1),
    ("tile_ones", "Tile", lambda t: [rand((2, 1, 3), t), ints([1, 4, 1])], {}, 1),
    ("eyelike", "EyeLike", lambda t: [rand((3, 4), t)], {"k": 1}, 1),
    ("eyelike_dtype", "EyeLike", lambda t: [rand((4, 3), t)], {"k": -1, "dtype": 7}, 1),
    ("onehot", "OneHot", lambda t: [ints([[0, 2], [-1, 5]]), ints(4), np.array([-1, 3], t)],
     {}, 1),
    ("onehot_axis0_float_indices", "OneHot",
     lambda t: [np.array([1.0, 2.0, 0.0], t), np.array(3.0, t), np.array([0, 1], t)],
     {"axis": 0}, 1),
    ("compress_axis", "Compress",
     lambda t: [rand((3, 4), t), np.array([True, False, True])], {"axis": 1}, 1),
    ("compress_flat", "Compress",
     lambda t: [rand((2, 3), t), np.array([False, True, True, False, True])], {}, 1),
    ("reverse_sequence", "ReverseSequence", lambda t: [rand((4, 3, 2), t), ints([4, 1, 3])],
     {}, 1),
    ("reverse_sequence_batch0", "ReverseSequence",
     lambda t: [rand((3, 4), t), ints([2, 0, 4])], {"batch_axis": 0, "time_axis": 1}, 1),
    ("unique_sorted", "Unique", lambda t: [np.array([2, 1, 1, 3, 4, 3], t)], {}, 4),
    ("unique_unsorted", "Unique", lambda t: [np.array([2, 1, 1, 3, 4, 3], t)],
     {"sorted": 0}, 4),
    ("unique_axis", "Unique", lambda t: [np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], t)],
     {"axis": 0}, 4),
    ("nonzero", "NonZero", lambda t: [np.array([[1, 0, 2], [0, 0, 3]], t)], {}, 1),
    ("size", "Size", lambda t: [rand((2, 3, 4), t)], {}, 1),
    ("depth_to_space_dcr", "DepthToSpace", lambda t: [rand((2, 8, 2, 3), t)],
     {"blocksize": 2}, 1),
    ("depth_to_space_crd", "DepthToSpace", lambda t: [rand((1, 8, 2, 3), t)],
     {"blocksize": 2, "mode": "CRD"}, 1),
    ("space_to_depth", "SpaceToDepth", lambda t: [rand((2, 2, 4, 6), t)], {"blocksize": 2}, 1),
    ("space_to_depth_crd", "SpaceToDepth", lambda t: [rand((1, 2, 4, 2), t)],
     {"blocksize": 2, "mode": "CRD"}, 1),
    ("det", "Det", lambda t: [rand((3, 3), t)], {}, 1),
    ("det_batched", "Det", lambda t: [rand((2, 3, 4, 4), t)], {}, 1),
    ("einsum_matmul", "Einsum", lambda t: [rand((2, 3), t), rand((3, 4), t, 1)],
     {"equation": "ij,jk->ik"}, 1),
    ("einsum_batch_ellipsis", "Einsum", lambda t: [rand((2, 3, 4), t), rand((2, 4, 5), t, 1)],
     {"equation": "...ij,...jk->...ik"}, 1),
    ("einsum_implicit", "Einsum", lambda t: [rand((3, 2), t), rand((2, 4), t, 1)],
     {"equation": "ab,bc"}, 1),
    ("einsum_trace", "Einsum", lambda t: [rand((4, 4), t)], {"equation": "ii"}, 1),
    ("einsum_diagonal", "Einsum", lambda t: [rand((3, 3, 2), t)], {"equation": "iij->ji"}, 1),
    ("einsum_sum", "Einsum", lambda t: [rand((3, 4), t)], {"equation": "ij->i"}, 1),
    ("einsum_three", "Einsum",
     lambda t: [rand((2, 3), t), rand((3, 4), t, 1), rand((4,), t, 2)],
     {"equation": "ij,jk,k->i"}, 1),
    ("einsum_broadcast_ellipsis", "Einsum", lambda t: [rand((2, 1, 3), t), rand((4, 3), t, 1)],
     {"equation": "...j,...j->..."}, 1),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward_matches_onnx(case, dtype):
    _, op_type, make, attributes, outputs = case
    inputs = make(dtype)
    got = d5ref.create_operator(op_type, **attributes).forward(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    want = onnx_run(op_type, inputs, attributes, outputs=outputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, **TOL[dtype])


INTEGER_CASES = ["argmax_last_ties", "argmin_ties", "topk_ties", "gather_elements",
                 "gathernd_batch", "scatternd_add", "scatter_elements_max", "cumsum",
                 "cumprod_exclusive", "trilu_lower_k", "tile", "compress_axis",
                 "reverse_sequence", "unique_axis", "nonzero", "depth_to_space_crd",
                 "einsum_matmul", "onehot"]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("name", INTEGER_CASES)
def test_integer_inputs(name, dtype):
    _, op_type, make, attributes, outputs = next(c for c in CASES if c[0] == name)
    inputs = [np.round(x * 3).astype(dtype) if x.dtype == np.float64 else x
              for x in make(np.float64)]
    got = d5ref.create_operator(op_type, **attributes).forward(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, onnx_run(op_type, inputs, attributes, outputs=outputs)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_trilu_and_nonzero_bool():
    X = np.random.default_rng(0).random((3, 4)) > 0.4
    for op_type, inputs in (("Trilu", [X, ints(1)]), ("NonZero", [X])):
        (want,) = onnx_run(op_type, inputs)
        np.testing.assert_array_equal(d5ref.create_operator(op_type).forward(*inputs), want)


# Cases whose forward is piecewise smooth at the random inputs drawn (no ties).
GRADIENT_CASES = ["topk", "topk_smallest_axis0", "gather_elements", "gather_elements_axis0",
                  "gathernd", "gathernd_full", "gathernd_batch", "scatternd", "scatternd_add",
                  "scatternd_mul", "scatternd_max", "scatternd_min", "scatter_elements",
                  "scatter_elements_add", "scatter_elements_mul", "scatter_elements_max",
                  "cumsum", "cumsum_exclusive_reverse", "cumsum_exclusive", "cumprod_reverse",
                  "cumprod_exclusive", "trilu_upper", "trilu_lower_k", "tile", "tile_ones",
                  "onehot", "compress_axis", "compress_flat", "reverse_sequence",
                  "reverse_sequence_batch0", "depth_to_space_dcr", "depth_to_space_crd",
                  "space_to_depth", "space_to_depth_crd", "det", "det_batched",
                  "einsum_matmul", "einsum_batch_ellipsis", "einsum_implicit", "einsum_trace",
                  "einsum_diagonal", "einsum_sum", "einsum_three", "einsum_broadcast_ellipsis",
                  "hardmax"]


@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradient_finite_differences(name):
    _, op_type, make, attributes, _ = next(c for c in CASES if c[0] == name)
    check_gradient(d5ref.create_operator(op_type, **attributes), make(np.float64))


@pytest.mark.parametrize("op_type,inputs,attributes", [
    ("CumProd", [np.array([[2.0, 0.0, 3.0, 0.0, 5.0], [1.5, -2.0, 0.0, 4.0, 0.5]]), ints(1)],
     {}),
    ("CumProd", [np.array([[2.0, 0.0, 3.0, 1.5], [0.0, 0.0, 4.0, 0.5]]), ints(1)],
     {"exclusive": 1, "reverse": 1}),
    ("ReduceProd", [np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 1.0]])], {}),
    ("ScatterND", [np.array([1.0, 2.0, 3.0]), ints([[0], [0], [2]]),
                   np.array([0.0, 4.0, 0.5])], {"reduction": "mul"}),
    ("Det", [np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, -1.0, 2.0]])], {}),
    ("Det", [np.array([[1.0, 2.0], [2.0, 4.0]])], {}),
], ids=["cumprod_zeros", "cumprod_zeros_exclusive_reverse", "prod_zeros", "scatter_mul_zero",
        "det_singular_rank2", "det_singular_2x2"])
def test_gradient_at_zeros_and_singular_points(op_type, inputs, attributes):
    """Where Y / x or det · A^-T would divide by zero the gradients stay exact."""
    op = d5ref.create_operator(op_type, **attributes)
    grads = check_gradient(op, inputs)
    assert grads.passed


TORCH = {
    "cumprod_reverse": lambda x, _: torch.flip(torch.cumprod(torch.flip(x, [1]), 1), [1]),
    "det_batched": lambda x: torch.linalg.det(x),
    "einsum_batch_ellipsis": lambda a, b: torch.einsum("...ij,...jk->...ik", a, b),
    "einsum_diagonal": lambda x: torch.einsum("iij->ji", x),
    "einsum_broadcast_ellipsis": lambda a, b: torch.einsum("...j,...j->...", a, b),
    "gather_elements": lambda x, i: torch.gather(x, 1, torch.where(i < 0, i + 4, i)),
    "tile": lambda x, _: x.repeat(2, 3),
    "topk": lambda x, _: torch.topk(x, 3),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(TORCH))
def test_backward_matches_torch(name, dtype):
    _, op_type, make, attributes, _ = next(c for c in CASES if c[0] == name)
    check_backward(d5ref.create_operator(op_type, **attributes), make(dtype), TORCH[name])


def test_unique_along_axis_in_order_of_first_occurrence():
    # (onnx's ReferenceEvaluator fails on this case: IndexError.) The columns are
    # (2,1), (1,1), (2,1), (0,0).
    X = np.array([[2, 1, 2, 0], [1, 1, 1, 0]], np.float32)
    Y, first, inverse, counts = d5ref.create_operator("Unique", axis=1, sorted=0).forward(X)
    np.testing.assert_array_equal(Y, [[2, 1, 0], [1, 1, 0]])
    for got, want in ((first, [0, 1, 3]), (inverse, [0, 1, 0, 2]), (counts, [2, 1, 1])):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_scatter_is_scatter_elements_without_reduction():
    # (onnx's ReferenceEvaluator has no Scatter: compare with ScatterElements.)
    op = d5ref.create_operator("Scatter", axis=1)
    inputs = [rand((3, 4)), ints([[1, 3], [0, 2]]), rand((2, 2), seed=1)]
    (want,) = onnx_run("ScatterElements", inputs, {"axis": 1})
    np.testing.assert_array_equal(op.forward(*inputs), want)
    check_gradient(op, inputs)


def test_topk_opset1_k_attribute_moves_to_input():
    from deep500.utils.onnx_interop.opset_upgrades import ATTRIBUTE_INPUTS
    assert ATTRIBUTE_INPUTS["TopK"] == {"k": (1, np.int64)}
    X = rand((3, 5), np.float32)
    want = onnx_run("TopK", [X], {"k": 2}, outputs=2, opset=1)
    got = d5ref.create_operator("TopK").forward(X, np.array(2, np.int64))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op_type,inputs,attributes,message", [
    ("GatherElements", [rand((3, 4)), ints([[0, 4]])], {"axis": 1}, r"\[-4, 3\]"),
    ("GatherElements", [rand((3, 4)), ints([0, 1])], {}, "rank of data"),
    ("GatherElements", [rand((3, 4)), np.array([[0.0]])], {}, "int32 or int64"),
    ("GatherND", [rand((3, 4)), ints([[0, 1, 2]])], {}, "exceeds the rank"),
    ("GatherND", [rand((3, 4)), np.zeros((2, 0), I64)], {}, r"\[1, 2\]"),
    ("GatherND", [rand((2, 3)), ints([[1], [0], [1]])], {"batch_dims": 1}, "batch"),
    ("ScatterND", [rand((4, 3)), ints([[1]]), rand((2, 3))], {}, "updates must have shape"),
    ("ScatterElements", [rand((3,)), ints([0]), rand((2,))], {}, "same shape"),
    ("ArgMax", [rand((3, 4))], {"axis": 2}, r"\[-2, 1\]"),
    ("TopK", [rand((3, 4)), ints([5])], {}, r"\[0, 4\]"),
    ("Trilu", [rand((4,))], {}, "rank >= 2"),
    ("Tile", [rand((2, 3)), ints([2])], {}, "one non-negative value per dimension"),
    ("EyeLike", [rand((2, 3, 4))], {}, "2-D"),
    ("OneHot", [ints([1]), ints(3), ints([0, 1, 2])], {}, r"\[off_value, on_value\]"),
    ("Compress", [rand((2, 3)), np.array([True] * 4)], {"axis": 1}, "only 3"),
    ("ReverseSequence", [rand((3, 2)), ints([4, 1])], {}, r"\[0, 3\]"),
    ("DepthToSpace", [rand((1, 6, 2, 2))], {"blocksize": 2}, "divisible"),
    ("SpaceToDepth", [rand((1, 2, 3, 4))], {"blocksize": 2}, "divisible"),
    ("SpaceToDepth", [rand((2, 4, 4))], {"blocksize": 2}, "4-D"),
    ("Det", [rand((2, 3))], {}, "square"),
    ("Einsum", [rand((2, 3)), rand((4, 5))], {"equation": "ij,jk->ik"}, "label 'j'"),
    ("Einsum", [rand((2, 3))], {"equation": "ijk->i"}, "rank 2"),
    ("CumSum", [rand((2, 3)), ints([0, 1])], {}, "one int32 or int64"),
    ("ScatterND", [rand((2,)), ints([[0]]), rand((1,))], {"reduction": "avg"}, "reduction"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input_is_explained(op_type, inputs, attributes, message):
    with pytest.raises(Deep500Error, match=message) as info:
        d5ref.create_operator(op_type, **attributes).forward(*inputs)
    assert op_type in str(info.value)


def test_shape_errors_are_shape_errors():
    with pytest.raises(ShapeError):
        d5ref.create_operator("Det").forward(rand((2, 3)))


def test_backprop_through_the_executor():
    """A graph of these operators (TopK with its int64 indices as a second graph output,
    GatherND, CumProd, Einsum, two reductions) backpropagates to its parameter as central
    finite differences of the executor's own inference say (float64, step 1e-6)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    W, x = rng.standard_normal((4, 6)), rng.standard_normal((2, 4))
    constants = {"k": ints([3]), "idx": ints([[0, 2], [1, 1], [3, 0]]), "ax": ints(1)}
    nodes = [
        helper.make_node("TopK", ["W", "k"], ["vals", "inds"], axis=1),
        helper.make_node("GatherND", ["vals", "idx"], ["g"]),
        helper.make_node("CumProd", ["vals", "ax"], ["cp"]),
        helper.make_node("Einsum", ["x", "cp"], ["e"], equation="bi,ij->bj"),
        helper.make_node("ReduceLogSumExp", ["e"], ["l1"], keepdims=0),
        helper.make_node("ReduceSumSquare", ["g"], ["l2"], keepdims=0),
        helper.make_node("Add", ["l1", "l2"], ["loss"]),
    ]
    graph = helper.make_graph(
        nodes, "index_ops", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 4])],
        [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, []),
         helper.make_tensor_value_info("inds", TensorProto.INT64, [4, 3])],
        initializer=[numpy_helper.from_array(W, "W")] +
                    [numpy_helper.from_array(v, k) for k, v in constants.items()])
    executor = d5ref.from_onnx(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 26)]))
    gradient = executor.inference_and_backprop({"x": x}, "loss")["W.grad"]

    def loss(weights):
        executor.network.feed_tensor("W", weights, is_param=True)
        return float(executor.inference({"x": x})["loss"])

    for direction in rng.standard_normal((3,) + W.shape):
        numeric = (loss(W + 1e-6 * direction) - loss(W - 1e-6 * direction)) / 2e-6
        np.testing.assert_allclose(np.sum(gradient * direction), numeric, rtol=1e-6)
