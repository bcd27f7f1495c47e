"""Flatten, Reshape, Transpose, Concat and Split against PyTorch and finite differences."""
import math

import numpy as np
import pytest

import deep500.frameworks.reference as d5ref
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.op_checks import (check_backward, check_forward,
                                                  check_gradient, torch)

DTYPES = [np.float32, np.float64]


def random(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def check_all(op, inputs, torch_fn, dtype):
    outputs = check_forward(op, inputs, torch_fn)
    for output in outputs:
        assert output.dtype == dtype
        # Outputs are new arrays: writing to them must not change the input.
        assert not np.shares_memory(output, inputs[0])
    check_backward(op, inputs, torch_fn)
    if dtype == np.float64 and np.size(inputs[0]):
        check_gradient(op, inputs)


def int64(values):
    return np.array(values, dtype=np.int64)


# -- Flatten ---------------------------------------------------------------------------
FLATTEN_CASES = [((2, 3, 4), axis) for axis in range(-3, 4)] + [
    ((5,), 0), ((5,), 1), ((5,), -1), ((2, 1, 3, 2), 2), ((2, 0, 3), 2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", FLATTEN_CASES, ids=str)
def test_flatten(shape, axis, dtype):
    op = d5ref.create_operator("Flatten", axis=axis)
    split = axis + len(shape) if axis < 0 else axis
    outer = math.prod(shape[:split])
    inner = math.prod(shape[split:])
    check_all(op, [random(shape, dtype)], lambda x: x.reshape(outer, inner), dtype)


def test_flatten_default_axis_is_one():
    assert d5ref.create_operator("Flatten").forward(np.zeros((2, 3, 4))).shape == (2, 12)


@pytest.mark.parametrize("axis", [4, -4])
def test_flatten_bad_axis(axis):
    with pytest.raises(ShapeError, match="Flatten.*axis"):
        d5ref.create_operator("Flatten", axis=axis).forward(np.zeros((2, 3, 4)))


# -- Reshape ---------------------------------------------------------------------------
# (input shape, shape input, allowzero, expected output shape)
RESHAPE_CASES = [
    ((2, 3, 4), [24], 0, (24,)),
    ((2, 3, 4), [4, -1], 0, (4, 6)),
    ((2, 3, 4), [0, -1], 0, (2, 12)),        # 0 copies the input's dimension
    ((2, 3, 4), [0, 0, 2, 2], 0, (2, 3, 2, 2)),
    ((2, 3, 4), [-1, 0], 0, (8, 3)),         # 0 copies by position, not by meaning
    ((2, 3, 4), [1, 24, 1], 1, (1, 24, 1)),
    ((1,), [], 0, ()),                       # empty shape: a scalar
    ((), [1, 1], 0, (1, 1)),
    ((2, 0, 3), [0, -1], 0, (2, 0)),
    ((2, 0, 3), [3, 0], 1, (3, 0)),          # allowzero: 0 is a real zero
    ((0, 3), [0, 3], 1, (0, 3)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,target,allowzero,expected", RESHAPE_CASES, ids=str)
def test_reshape(shape, target, allowzero, expected, dtype):
    op = d5ref.create_operator("Reshape", allowzero=allowzero)
    inputs = [random(shape, dtype), int64(target)]
    check_all(op, inputs, lambda x, _: x.reshape(expected), dtype)
    assert op.backward([np.ones(expected, dtype)], inputs, None)[1] is None


@pytest.mark.parametrize("shape,target,allowzero,message", [
    ((2, 3, 4), [5, -1], 0, "cannot fill"),
    ((2, 3, 4), [5, 5], 0, "cannot take"),
    ((2, 3, 4), [-1, -1], 0, "at most one"),
    ((2, 3, 4), [2, -2, 6], 0, ">= -1"),
    ((2, 3), [2, 3, 0], 0, "does not have"),
    ((0, 3), [0, -1], 1, "both"),
    ((2, 3, 4), [0, 12], 1, "cannot take"),   # allowzero: 0 is not a copy
])
def test_reshape_errors(shape, target, allowzero, message):
    op = d5ref.create_operator("Reshape", allowzero=allowzero)
    with pytest.raises(ShapeError, match=message) as info:
        op.forward(np.zeros(shape), int64(target))
    assert "Reshape" in str(info.value)


# -- Transpose -------------------------------------------------------------------------
TRANSPOSE_CASES = [((), None), ((5,), None), ((5,), [0]), ((2, 3), None), ((2, 3), [1, 0]),
                   ((2, 3), [0, 1]), ((2, 3, 4), None), ((2, 3, 4), [1, 0, 2]),
                   ((2, 3, 4), [1, 2, 0]), ((2, 1, 3, 2), [3, 0, 2, 1])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,perm", TRANSPOSE_CASES, ids=str)
def test_transpose(shape, perm, dtype):
    op = d5ref.create_operator("Transpose", **({} if perm is None else {"perm": perm}))
    dims = list(reversed(range(len(shape)))) if perm is None else perm
    check_all(op, [random(shape, dtype)], lambda x: x.permute(tuple(dims)).clone(), dtype)


@pytest.mark.parametrize("perm", [[0, 1], [0, 0, 1], [0, 1, 3], [-1, 0, 1]])
def test_transpose_bad_perm(perm):
    with pytest.raises(ShapeError, match="Transpose.*perm"):
        d5ref.create_operator("Transpose", perm=perm).forward(np.zeros((2, 3, 4)))


# -- Concat ----------------------------------------------------------------------------
CONCAT_CASES = [
    ([(2, 3)], 0),
    ([(2, 3), (4, 3)], 0),
    ([(2, 3), (2, 1), (2, 4)], 1),
    ([(2, 3), (2, 1), (2, 4)], -1),
    ([(2, 3, 4), (2, 3, 4)], -3),
    ([(2, 1, 4), (2, 3, 4), (2, 2, 4)], 1),
    ([(5,), (0,), (2,)], 0),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes,axis", CONCAT_CASES, ids=str)
def test_concat(shapes, axis, dtype):
    op = d5ref.create_operator("Concat", axis=axis)
    inputs = [random(shape, dtype, seed) for seed, shape in enumerate(shapes)]
    check_forward(op, inputs, lambda *xs: torch.cat(xs, dim=axis))
    check_backward(op, inputs, lambda *xs: torch.cat(xs, dim=axis))
    if dtype == np.float64:
        check_gradient(op, inputs)


@pytest.mark.parametrize("shapes,attributes,error,message", [
    ([(2, 3), (3, 3)], {"axis": 1}, ShapeError, "differ outside axis 1"),
    ([(2, 3), (2, 3, 1)], {"axis": 0}, ShapeError, "differ"),
    ([(2, 3), (2, 3)], {"axis": 2}, ShapeError, "axis 2 is outside"),
    ([(2, 3), (2, 3)], {"axis": -3}, ShapeError, "axis -3 is outside"),
    ([(2, 3), (2, 3)], {}, Deep500Error, "needs the attribute axis"),
    ([], {"axis": 0}, ShapeError, "at least one input"),
])
def test_concat_errors(shapes, attributes, error, message):
    op = d5ref.create_operator("Concat", **attributes)
    with pytest.raises(error, match=message):
        op.forward(*[np.zeros(s) for s in shapes])


def test_concat_dtype_mismatch():
    with pytest.raises(ShapeError, match="dtype"):
        d5ref.create_operator("Concat", axis=0).forward(np.zeros(2, np.float32),
                                                         np.zeros(2, np.float64))


# -- Split -----------------------------------------------------------------------------
# (input shape, axis, split input, num_outputs, expected sizes)
SPLIT_CASES = [
    ((6, 2), 0, [2, 4], None, [2, 4]),
    ((6, 2), 0, [1, 2, 3], None, [1, 2, 3]),
    ((2, 7), 1, [3, 0, 4], None, [3, 0, 4]),
    ((2, 7), -1, [7], None, [7]),
    ((2, 3, 4), -2, [1, 2], 2, [1, 2]),          # both given, consistent
    ((6, 2), 0, None, 3, [2, 2, 2]),
    ((2, 3, 4), 2, None, 2, [2, 2]),
    ((7,), 0, None, 3, [3, 3, 1]),               # uneven: ceil-sized, smaller last part
    ((2, 10), 1, None, 3, [4, 4, 2]),
    ((6,), 0, None, 4, [2, 2, 2, 0]),            # the ONNX rule can leave the last empty
    ((4, 3), 1, None, 1, [3]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis,split,num_outputs,sizes", SPLIT_CASES, ids=str)
def test_split(shape, axis, split, num_outputs, sizes, dtype):
    attributes = {"axis": axis} if num_outputs is None else {"axis": axis,
                                                             "num_outputs": num_outputs}
    op = d5ref.create_operator("Split", **attributes)
    inputs = [random(shape, dtype)] + ([] if split is None else [int64(split)])

    def torch_split(x, *_):
        return tuple(torch.split(x, sizes, dim=axis))

    outputs = op.forward(*inputs)
    assert isinstance(outputs, tuple) and [o.shape[axis] for o in outputs] == sizes
    check_all(op, inputs, torch_split, dtype)
    grads = op.backward([np.ones_like(o) for o in outputs], inputs, outputs)
    assert len(grads) == len(inputs) and (split is None or grads[1] is None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_unused_outputs(dtype):
    op = d5ref.create_operator("Split", axis=1, num_outputs=3)
    X = random((2, 6), dtype)
    outputs = op.forward(X)
    g0, g2 = random((2, 2), dtype, 1), random((2, 2), dtype, 2)
    (dX,) = op.backward([g0, None, g2], [X], outputs)
    assert dX.dtype == dtype
    np.testing.assert_array_equal(dX, np.concatenate([g0, np.zeros((2, 2), dtype), g2], 1))


def test_split_default_axis_is_zero():
    outputs = d5ref.create_operator("Split", num_outputs=2).forward(np.zeros((4, 6)))
    assert [o.shape for o in outputs] == [(2, 6), (2, 6)]


@pytest.mark.parametrize("attributes,split,message", [
    ({}, [2, 2], "sum to 6"),
    ({}, [7, -1], ">= 0"),
    ({}, [], "sum to 6"),
    ({"num_outputs": 3}, [3, 3], "disagrees"),
    ({}, None, "needs the split input or the num_outputs"),
    ({"num_outputs": 0}, None, "num_outputs must be >= 1"),
    ({"num_outputs": 4, "axis": 1}, None, "cannot form 4 parts"),   # 5 -> 2, 2, 2, -1
    ({"axis": 2, "num_outputs": 2}, None, "axis 2 is outside"),
])
def test_split_errors(attributes, split, message):
    op = d5ref.create_operator("Split", **attributes)
    X = np.zeros((6, 5))
    with pytest.raises(ShapeError, match=message) as info:
        op.forward(X) if split is None else op.forward(X, int64(split))
    assert "Split" in str(info.value)
