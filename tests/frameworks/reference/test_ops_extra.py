"""Reference operators that exported models need (Identity, Shape, Gather, Slice, Cast,
Unsqueeze, Squeeze, ConstantOfShape, Expand, Exp, Log, Neg, Sqrt, Erf, Pow, Clip, Equal,
Where, Range, NegativeLogLikelihoodLoss, GlobalMaxPool, ReduceMax, Min, Max) against
PyTorch or NumPy closed forms, PyTorch autograd and finite differences."""
import math

import numpy as np
import onnx
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from tests.frameworks.reference.op_checks import (check_backward, check_forward,
                                                  check_gradient, torch)

F = torch.nn.functional
DTYPES = [np.float32, np.float64]


def random(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def positive(shape, dtype, seed=0, low=0.2, high=3.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def int64(values):
    return np.array(values, dtype=np.int64)


def check_all(op, inputs, torch_fn, dtype, **tol):
    """Forward and backward against PyTorch; finite differences in float64."""
    outputs = check_forward(op, inputs, torch_fn, **tol)
    for output in outputs:
        assert not any(np.shares_memory(output, x) for x in inputs if x is not None)
    check_backward(op, inputs, torch_fn, **tol)
    if dtype == np.float64:
        check_gradient(op, inputs)
    return outputs


# -- elementwise -------------------------------------------------------------------------
UNARY = [
    ("Identity", lambda x: x.clone(), random),
    ("Exp", torch.exp, random),
    ("Log", torch.log, positive),
    ("Neg", torch.neg, random),
    ("Sqrt", torch.sqrt, positive),
    ("Erf", torch.erf, random),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (3, 4), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("op_type,torch_fn,make", UNARY, ids=[u[0] for u in UNARY])
def test_unary(op_type, torch_fn, make, shape, dtype):
    (y,) = check_all(create_operator(op_type), [make(shape, dtype)], torch_fn, dtype)
    assert y.dtype == dtype and y.shape == shape


def test_erf_values():
    x = np.array([-3.0, -0.5, 0.0, 0.25, 1.0, 6.0])
    expected = [math.erf(v) for v in x]
    np.testing.assert_allclose(create_operator("Erf").forward(x), expected, rtol=1e-15)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5))],
                         ids=str)
def test_pow(shapes, dtype):
    X, Y = positive(shapes[0], dtype, 1), random(shapes[1], dtype, 2)
    check_all(create_operator("Pow"), [X, Y], torch.pow, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_integer_exponent(dtype):
    X, Y = random((3, 4), dtype), int64([[0, 1, 2, 3]])
    op = create_operator("Pow")
    check_forward(op, [X, Y], torch.pow)
    check_backward(op, [X, Y], torch.pow, wrt=[0])
    dX, dY = op.backward([np.ones((3, 4), dtype)], [X, Y], [op.forward(X, Y)])
    assert dY is None and dX.dtype == dtype


def test_pow_at_zero_base():
    # d/dY of 0^Y is taken as 0 (PyTorch's convention), and 0^0 has no X-gradient.
    X, Y = np.array([0.0, 0.0, 2.0]), np.array([0.0, 2.0, 0.0])
    op = create_operator("Pow")
    dX, dY = op.backward([np.ones(3)], [X, Y], [op.forward(X, Y)])
    np.testing.assert_array_equal(dX, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(dY, [0.0, 0.0, math.log(2.0)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bounds", [(-0.5, 0.7), (-0.3, None), (None, 0.4), (None, None)],
                         ids=str)
def test_clip(bounds, dtype):
    x = random((4, 5), dtype)
    low, high = (None if b is None else np.array(b, dtype) for b in bounds)
    inputs = [x, low, high] if high is not None else ([x, low] if low is not None else [x])

    def torch_fn(x, low=None, high=None):
        return x.clone() if low is None and high is None else torch.clamp(x, low, high)
    check_all(create_operator("Clip"), inputs, torch_fn, dtype)


def test_clip_rejects_non_scalar_bounds():
    with pytest.raises(ShapeError, match="Clip: min must be a scalar"):
        create_operator("Clip").forward(np.zeros(3), np.zeros(2))


@pytest.mark.parametrize("dtype", DTYPES + [np.int64])
def test_equal(dtype):
    A = np.array([[1, 2, 3], [4, 5, 6]], dtype)
    B = np.array([1, 5, 6], dtype)
    op = create_operator("Equal")
    np.testing.assert_array_equal(op.forward(A, B), [[True, False, False],
                                                     [False, True, True]])
    assert op.forward(A, B).dtype == np.bool_
    assert op.backward([None], [A, B], [op.forward(A, B)]) == [None, None]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), (4,)),
                                    ((2, 3, 4), (4,), (3, 1))], ids=str)
def test_where(shapes, dtype):
    condition = np.random.default_rng(3).random(shapes[0]) > 0.5
    X, Y = random(shapes[1], dtype, 1), random(shapes[2], dtype, 2)
    op = create_operator("Where")
    check_forward(op, [condition, X, Y], torch.where)
    grads = check_backward(op, [condition, X, Y], torch.where, wrt=[1, 2])
    assert grads[0] is None
    if dtype == np.float64:
        check_gradient(op, [condition, X, Y], wrt=[1, 2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((3, 4),), ((3, 4), (3, 4)), ((2, 3, 4), (4,), (3, 1))],
                         ids=str)
@pytest.mark.parametrize("op_type", ["Min", "Max"])
def test_min_max(op_type, shapes, dtype):
    inputs = [random(shape, dtype, seed) for seed, shape in enumerate(shapes)]
    pairwise = torch.minimum if op_type == "Min" else torch.maximum

    def torch_fn(*xs):
        result = xs[0].clone()
        for x in xs[1:]:
            result = pairwise(result, x)
        return result
    check_all(create_operator(op_type), inputs, torch_fn, dtype)


def test_min_max_ties_go_to_the_first_input():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])
    op = create_operator("Max")
    da, db = op.backward([np.array([10.0, 20.0, 30.0])], [a, b], [op.forward(a, b)])
    np.testing.assert_array_equal(da, [10.0, 20.0, 30.0])
    np.testing.assert_array_equal(db, [0.0, 0.0, 0.0])


# -- shapes and indexing -------------------------------------------------------------------
@pytest.mark.parametrize("start,end", [(0, None), (1, None), (-1, None), (0, 2), (-10, 10),
                                       (2, 1), (1, -1)])
def test_shape(start, end):
    x = np.zeros((2, 3, 4))
    op = create_operator("Shape", start=start, **({} if end is None else {"end": end}))
    expected = list(x.shape)[start:end]
    y = op.forward(x)
    assert y.dtype == np.int64 and y.tolist() == expected
    assert op.backward([None], [x], [y]) == [None]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis,indices", [
    ((5, 3), 0, [0, 2, 2, -1]),            # repeated and negative indices
    ((5, 3), 1, [[0, 1], [2, 0]]),
    ((2, 4, 3), -2, [3, 0, 3]),
    ((4, 3), 0, 2),                        # a scalar index drops the axis
], ids=str)
def test_gather(shape, axis, indices, dtype):
    x = random(shape, dtype)
    indices = int64(indices)
    op = create_operator("Gather", axis=axis)
    expected = np.take(x, np.where(indices < 0, indices + shape[axis], indices), axis=axis)
    np.testing.assert_array_equal(op.forward(x, indices), expected)

    def torch_fn(x, idx):
        return x[(slice(None),) * (axis % len(shape)) + (idx,)]
    grads = check_backward(op, [x, indices], torch_fn, wrt=[0])
    assert grads[1] is None
    if dtype == np.float64:
        check_gradient(op, [x, indices], wrt=[0])


def test_gather_out_of_range():
    with pytest.raises(ShapeError, match="Gather: indices must lie in"):
        create_operator("Gather").forward(np.zeros((3, 2)), int64([3]))


SLICE_CASES = [
    # (shape, starts, ends, axes, steps)
    ((6, 4), [1], [4], None, None),
    ((6, 4), [1, 0], [-1, 3], [0, 1], None),
    ((6, 4), [0], [100], [1], [2]),                     # ends clamped
    ((6, 4), [-100], [2], [0], None),                   # starts clamped
    ((6, 4), [2, 1], [6, 4], [-1, -2], [1, 2]),         # negative axes
    ((6, 4), [5], [0], [0], [-1]),                      # negative step
    ((6, 4), [-1], [-100], [0], [-2]),                  # negative step through index 0
    ((6, 4), [9223372036854775807], [-9223372036854775807], [1], [-1]),   # INT64 extremes
    ((6, 4), [3], [3], [0], None),                      # empty
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,starts,ends,axes,steps", SLICE_CASES, ids=str)
def test_slice(shape, starts, ends, axes, steps, dtype):
    x = random(shape, dtype)
    inputs = [x, int64(starts), int64(ends)]
    if axes is not None or steps is not None:
        inputs.append(int64(axes if axes is not None else range(len(starts))))
    if steps is not None:
        inputs.append(int64(steps))
    op = create_operator("Slice")
    # NumPy's slicing clamps like ONNX, except that an end before index 0 must be None.
    index = [slice(None)] * len(shape)
    for i, (start, end) in enumerate(zip(starts, ends)):
        axis = (axes or range(len(starts)))[i] % len(shape)
        step = steps[i] if steps else 1
        if step < 0 and end + (shape[axis] if end < 0 else 0) < 0:
            end = None
        index[axis] = slice(start, end, step)
    y = op.forward(*inputs)
    np.testing.assert_array_equal(y, x[tuple(index)])
    assert not np.shares_memory(y, x)
    if all(s > 0 for s in steps or [1]):   # PyTorch slicing has no negative steps
        check_backward(op, inputs, lambda x, *_: x[tuple(index)], wrt=[0])
    if dtype == np.float64 and y.size:
        check_gradient(op, inputs, wrt=[0])


def test_slice_rejects_zero_step():
    with pytest.raises(ShapeError, match="steps must not be 0"):
        create_operator("Slice").forward(np.zeros(4), int64([0]), int64([2]), int64([0]),
                                         int64([0]))


@pytest.mark.parametrize("shape,axes", [((3, 4), [0]), ((3, 4), [-1]), ((3, 4), [1, 0]),
                                        ((3,), [0, 2, -1]), ((), [0])], ids=str)
def test_unsqueeze(shape, axes):
    x = random(shape, np.float64)
    rank = len(shape) + len(axes)
    expected_shape = list(shape)
    for axis in sorted(a % rank for a in axes):
        expected_shape.insert(axis, 1)
    op = create_operator("Unsqueeze")
    check_all(op, [x, int64(axes)], lambda t, _: t.reshape(expected_shape), np.float64)
    with pytest.raises(ShapeError, match="Unsqueeze: axes"):
        op.forward(x, int64([rank]))


@pytest.mark.parametrize("shape,axes", [((3, 1, 4, 1), None), ((3, 1, 4, 1), [1]),
                                        ((3, 1, 4, 1), [-1, 1]), ((1,), [0])], ids=str)
def test_squeeze(shape, axes):
    x = random(shape, np.float32)
    inputs = [x] if axes is None else [x, int64(axes)]
    torch_fn = (lambda t: t.squeeze()) if axes is None else (lambda t, _: t.squeeze(
        tuple(axes)))
    check_all(create_operator("Squeeze"), inputs, torch_fn, np.float32)


def test_squeeze_rejects_non_unit_axis():
    with pytest.raises(ShapeError, match=r"Squeeze: axes \[0\].*do not have size 1"):
        create_operator("Squeeze").forward(np.zeros((3, 1)), int64([0]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,target", [((3, 1), [2, 3, 4]), ((3, 4), [1, 1]),
                                          ((1,), [5]), ((2, 1, 3), [2, 4, 1])], ids=str)
def test_expand(shape, target, dtype):
    out_shape = np.broadcast_shapes(shape, tuple(target))
    check_all(create_operator("Expand"), [random(shape, dtype), int64(target)],
              lambda t, _: torch.broadcast_to(t, out_shape), dtype)


def test_expand_incompatible():
    with pytest.raises(ShapeError, match="does not broadcast"):
        create_operator("Expand").forward(np.zeros((3, 2)), int64([4, 3]))


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float64), np.array([7], np.int64),
                                   onnx.numpy_helper.from_array(np.array([1.5], np.float32))],
                         ids=["default", "float64", "int64", "TensorProto"])
def test_constantofshape(value):
    op = create_operator("ConstantOfShape", **({} if value is None else {"value": value}))
    y = op.forward(int64([2, 3]))
    if value is None:
        expected = np.zeros((2, 3), np.float32)
    elif isinstance(value, onnx.TensorProto):
        expected = np.full((2, 3), 1.5, np.float32)
    else:
        expected = np.full((2, 3), value[0], value.dtype)
    assert y.dtype == expected.dtype
    np.testing.assert_array_equal(y, expected)
    assert op.forward(int64([])).shape == ()
    assert op.backward([None], [int64([2, 3])], [y]) == [None]


@pytest.mark.parametrize("source", DTYPES + [np.int64])
@pytest.mark.parametrize("to,target", [(onnx.TensorProto.FLOAT, np.float32),
                                       (onnx.TensorProto.DOUBLE, np.float64),
                                       (onnx.TensorProto.INT32, np.int32),
                                       (onnx.TensorProto.BOOL, np.bool_),
                                       ("FLOAT16", np.float16)], ids=str)
def test_cast(to, target, source):
    x = (random((3, 4), source) * 4).astype(source)
    op = create_operator("Cast", to=to)
    y = op.forward(x)
    assert y.dtype == target
    np.testing.assert_array_equal(y, x.astype(target))
    floats = np.issubdtype(source, np.floating) and np.issubdtype(target, np.floating)
    (dx,) = op.backward([np.ones_like(y) if np.issubdtype(target, np.floating) else None],
                        [x], [y])
    if floats:
        assert dx.dtype == source and np.all(dx == 1)
    else:
        assert dx is None


def test_cast_float32_to_float64_backward():
    x = random((3, 4), np.float32)
    check_backward(create_operator("Cast", to=onnx.TensorProto.DOUBLE), [x],
                   lambda t: t.to(torch.float64))


def test_cast_errors():
    with pytest.raises(Deep500Error, match="needs the attribute to"):
        create_operator("Cast")
    with pytest.raises(UnsupportedError, match="UNDEFINED"):
        create_operator("Cast", to=onnx.TensorProto.UNDEFINED)


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (3, 9, 3, np.int64), (10, 4, -2, np.int32), (0, 0, 1, np.int64), (5, 1, 1, np.int64),
    (0.0, 1.0, 0.3, np.float32), (1.0, -1.0, -0.5, np.float64), (0.5, 0.5, 0.1, np.float64),
], ids=str)
def test_range(start, limit, delta, dtype):
    op = create_operator("Range")
    inputs = [np.array(v, dtype) for v in (start, limit, delta)]
    y = op.forward(*inputs)
    s, l, d = (float(v) for v in inputs)
    count = max(math.ceil((l - s) / d), 0)
    assert y.dtype == dtype and y.shape == (count,)
    np.testing.assert_allclose(y, [s + i * d for i in range(count)], rtol=1e-6)
    assert op.backward([None], inputs, [y]) == [None, None, None]


# -- reductions, pooling, loss -----------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axes,keepdims", [((2, 3, 4), None, 1), ((2, 3, 4), [1], 0),
                                                 ((2, 3, 4), [0, -1], 1), ((5,), [0], 0)],
                         ids=str)
def test_reducemax(shape, axes, keepdims, dtype):
    x = random(shape, dtype)
    dims = tuple(range(len(shape))) if axes is None else tuple(axes)
    inputs = [x] if axes is None else [x, int64(axes)]
    check_all(create_operator("ReduceMax", keepdims=keepdims), inputs,
              lambda t, *_: torch.amax(t, dim=dims, keepdim=bool(keepdims)), dtype)


def test_reducemax_shares_gradient_between_ties():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]])
    op = create_operator("ReduceMax", keepdims=0)
    inputs = [x, int64([1])]
    check_backward(op, inputs, lambda t, _: torch.amax(t, dim=1))
    (dx, _) = op.backward([np.array([1.0, 1.0])], inputs, [op.forward(*inputs)])
    np.testing.assert_array_equal(dx, [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 2, 3, 2)], ids=str)
def test_globalmaxpool(shape, dtype):
    spatial = tuple(range(2, len(shape)))
    check_all(create_operator("GlobalMaxPool"), [random(shape, dtype)],
              lambda t: torch.amax(t, dim=spatial, keepdim=True), dtype)


def test_globalmaxpool_needs_spatial_axes():
    with pytest.raises(ShapeError, match="GlobalMaxPool"):
        create_operator("GlobalMaxPool").forward(np.zeros((2, 3)))


NLL_CASES = [
    # (input shape, reduction, ignore_index, weighted)
    ((5, 4), "mean", None, False),
    ((5, 4), "sum", None, True),
    ((5, 4), "none", None, False),
    ((5, 4), "mean", 2, True),
    ((3, 4, 2), "mean", None, True),     # (N, C, d1)
    ((3, 4, 2, 2), "none", 1, False),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,reduction,ignore_index,weighted", NLL_CASES, ids=str)
def test_negative_log_likelihood_loss(shape, reduction, ignore_index, weighted, dtype):
    rng = np.random.default_rng(4)
    log_prob = random(shape, dtype)
    target = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int64)
    target.flat[0] = 2   # so that an ignore_index of 2 ignores something
    inputs = [log_prob, target] + ([positive((shape[1],), dtype, 5)] if weighted else [])
    attributes = {"reduction": reduction}
    if ignore_index is not None:
        attributes["ignore_index"] = ignore_index
    op = create_operator("NegativeLogLikelihoodLoss", **attributes)

    def torch_fn(x, t, w=None):
        return F.nll_loss(x, t, weight=w, reduction=reduction,
                          ignore_index=-100 if ignore_index is None else ignore_index)
    (loss,) = check_forward(op, inputs, torch_fn)
    assert loss.dtype == dtype
    grads = check_backward(op, inputs, torch_fn, wrt=[0])
    assert grads[1] is None
    if dtype == np.float64:
        check_gradient(op, inputs, wrt=[0])


def test_negative_log_likelihood_loss_checks_labels():
    op = create_operator("NegativeLogLikelihoodLoss")
    with pytest.raises(Deep500Error, match="out of range"):
        op.forward(np.zeros((2, 3)), int64([0, 3]))
