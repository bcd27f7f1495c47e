"""ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceMin, ReduceProd,
ReduceSumSquare (and ReduceMax/Mean/Sum on the opset-18 corner cases) against onnx's
ReferenceEvaluator, backward against finite differences and PyTorch."""
import numpy as np
import pytest

import deep500.frameworks.reference as d5ref
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_backward, check_gradient, torch

NEW = ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMin",
       "ReduceProd", "ReduceSumSquare"]
ALL = NEW + ["ReduceMax", "ReduceMean", "ReduceSum"]
# Forward tolerances: float32 sums of ~24 terms round differently in two implementations.
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-14)}

AXES = [None, [], [0], [-1], [0, 2], [2, -3], [0, 1, 2]]


def data(name, shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if name == "ReduceLogSum":   # log of a sum: keep the sums positive
        x = np.abs(x) + 0.1
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("name", ALL)
def test_forward_matches_onnx(name, axes, keepdims, dtype):
    X = data(name, (2, 3, 4), dtype)
    inputs = [X] + ([] if axes is None else [np.array(axes, np.int64)])
    Y = d5ref.create_operator(name, keepdims=keepdims).forward(*inputs)
    (want,) = onnx_run(name, inputs, {"keepdims": keepdims})
    assert Y.dtype == dtype and Y.shape == want.shape
    np.testing.assert_allclose(Y, want, **TOL[dtype])


@pytest.mark.parametrize("noop", [0, 1])
@pytest.mark.parametrize("name", ALL)
def test_empty_axes_input_and_noop(name, noop):
    """noop_with_empty_axes=1 reduces nothing but keeps the elementwise part (ReduceL1 is
    Abs then, ReduceSumSquare squares)."""
    X = data(name, (2, 3), np.float32)
    inputs = [X, np.array([], np.int64)]
    op = d5ref.create_operator(name, keepdims=0, noop_with_empty_axes=noop)
    (want,) = onnx_run(name, inputs, {"keepdims": 0, "noop_with_empty_axes": noop})
    np.testing.assert_allclose(op.forward(*inputs), want, rtol=1e-5)


# (The mean of no elements is 0/0; the spec does not define it.)
@pytest.mark.parametrize("name", [n for n in ALL if n != "ReduceMean"])
def test_empty_set(name):
    """Reducing an axis of size 0 gives the reduction's identity (0, 1, -inf, +inf)."""
    X = np.zeros((2, 0, 4), np.float32)
    inputs = [X, np.array([1], np.int64)]
    (want,) = onnx_run(name, inputs, {"keepdims": 1})
    Y = d5ref.create_operator(name).forward(*inputs)
    assert Y.shape == (2, 1, 4)
    np.testing.assert_array_equal(Y, want)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("name", ["ReduceL1", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                                  "ReduceMax", "ReduceSum"])
def test_integers(name, dtype):
    X = np.random.default_rng(1).integers(-4, 5, (3, 4)).astype(dtype)
    inputs = [X, np.array([1], np.int64)]
    (want,) = onnx_run(name, inputs, {"keepdims": 0})
    Y = d5ref.create_operator(name, keepdims=0).forward(*inputs)
    assert Y.dtype == dtype
    np.testing.assert_array_equal(Y, want)


def test_log_sum_exp_does_not_overflow():
    X = np.array([[1000.0, 1000.0], [-1000.0, -1001.0]], np.float32)
    Y = d5ref.create_operator("ReduceLogSumExp", keepdims=0).forward(X, np.array([1]))
    np.testing.assert_allclose(Y, [1000 + np.log(2), -1000 + np.log1p(np.exp(-1))],
                               rtol=1e-6)


@pytest.mark.parametrize("axes", [None, [1], [0, 2], []], ids=str)
@pytest.mark.parametrize("name", NEW)
def test_gradient_finite_differences(name, axes):
    X = data(name, (2, 3, 4), np.float64, seed=3)
    inputs = [X] + ([] if axes is None else [np.array(axes, np.int64)])
    for keepdims in (0, 1):
        check_gradient(d5ref.create_operator(name, keepdims=keepdims), inputs)
    noop = d5ref.create_operator(name, noop_with_empty_axes=1)
    check_gradient(noop, inputs)


TORCH = {
    "ReduceL1": lambda x, d: x.abs().sum(dim=d),
    "ReduceL2": lambda x, d: torch.linalg.vector_norm(x, dim=d),
    "ReduceLogSum": lambda x, d: x.sum(dim=d).log(),
    "ReduceLogSumExp": lambda x, d: torch.logsumexp(x, dim=d),
    "ReduceMin": lambda x, d: x.amin(dim=d),
    "ReduceProd": lambda x, d: x.prod(dim=d[0]),
    "ReduceSumSquare": lambda x, d: (x * x).sum(dim=d),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", NEW)
def test_backward_matches_torch(name, dtype):
    X = data(name, (3, 4, 2), dtype, seed=5)
    op = d5ref.create_operator(name, keepdims=0)
    check_backward(op, [X, np.array([1], np.int64)], lambda x, _: TORCH[name](x, (1,)))


def test_prod_gradient_with_zeros():
    """One zero: only it gets the product of the others; two zeros: all gradients 0."""
    X = np.array([[2.0, 0.0, 3.0], [0.0, 5.0, 0.0], [1.5, -2.0, 4.0]])
    op = d5ref.create_operator("ReduceProd", keepdims=0)
    inputs = [X, np.array([1], np.int64)]
    (dX, _) = op.backward([np.ones(3)], inputs, [op.forward(*inputs)])
    np.testing.assert_array_equal(dX, [[0, 6, 0], [0, 0, 0], [-8, 6, -3]])
    check_gradient(op, inputs)


def test_l2_gradient_at_zero_is_zero():
    op = d5ref.create_operator("ReduceL2", keepdims=0)
    X = np.zeros((2, 3))
    (dX, _) = op.backward([np.ones(2)], [X, np.array([1])], [op.forward(X, np.array([1]))])
    np.testing.assert_array_equal(dX, 0)


@pytest.mark.parametrize("name", NEW)
def test_older_opset_axes_attribute(name):
    """Opset 13 takes axes as an attribute; the visitor turns it into the axes input."""
    from deep500.utils.onnx_interop.opset_upgrades import ATTRIBUTE_INPUTS
    assert ATTRIBUTE_INPUTS[name] == {"axes": (1, np.int64)}
    X = data(name, (2, 3, 4), np.float32)
    (want,) = onnx_run(name, [X], {"axes": [1], "keepdims": 0}, opset=13)
    Y = d5ref.create_operator(name, keepdims=0).forward(X, np.array([1], np.int64))
    np.testing.assert_allclose(Y, want, rtol=1e-5)


@pytest.mark.parametrize("axes,message", [([3], r"\[-3, 2\]"), ([0, -3], "twice")])
@pytest.mark.parametrize("name", NEW)
def test_bad_axes(name, axes, message):
    with pytest.raises(ShapeError, match=message) as info:
        d5ref.create_operator(name).forward(np.ones((2, 3, 4)), np.array(axes, np.int64))
    assert name in str(info.value)


@pytest.mark.parametrize("name", ["ReduceMax", "ReduceMin"])
def test_bfloat16(name):
    """Extension float types (bfloat16, as in onnx's attention tests) reduce as floats."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    X = data(name, (3, 4), np.float32).astype(ml_dtypes.bfloat16)
    inputs = [X, np.array([1], np.int64)]
    Y = d5ref.create_operator(name, keepdims=0).forward(*inputs)
    (want,) = onnx_run(name, inputs, {"keepdims": 0})
    assert Y.dtype == X.dtype
    np.testing.assert_array_equal(Y.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("name", ALL)
def test_backward_without_upstream_gradient(name):
    """An output no loss depends on (grads[0] is None) gives a zero gradient."""
    X = data(name, (2, 3), np.float64)
    op = d5ref.create_operator(name)
    (dX,) = op.backward([None], [X], [op.forward(X)])
    assert dX.shape == X.shape and not dX.any()
