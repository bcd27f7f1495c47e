"""ReduceMean and ReduceSum against PyTorch and finite differences."""
import numpy as np
import pytest

import deep500.frameworks.reference as d5ref
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.op_checks import (check_backward, check_forward,
                                                  check_gradient, torch)

DTYPES = [np.float32, np.float64]
OPS = {"ReduceMean": torch.mean, "ReduceSum": torch.sum}

# (input shape, axes input; None leaves it out)
CASES = [
    ((2, 3, 4), None),
    ((2, 3, 4), []),
    ((2, 3, 4), [0]),
    ((2, 3, 4), [-1]),
    ((2, 3, 4), [0, 2]),
    ((2, 3, 4), [2, -3]),
    ((2, 3, 4), [0, 1, 2]),
    ((3, 1, 2), [1]),
    ((5,), [0]),
    ((5,), None),
    ((), None),
]


def random(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def torch_reduce(name, shape, axes, keepdims, noop):
    if not axes and noop:
        return lambda x, *_: x.clone()
    dims = tuple(range(len(shape))) if not axes else tuple(axes)
    if not dims:   # a 0-D input: reducing it changes nothing
        return lambda x, *_: x.clone()
    return lambda x, *_: OPS[name](x, dim=dims, keepdim=bool(keepdims))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("shape,axes", CASES, ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_reduce(name, shape, axes, keepdims, dtype):
    op = d5ref.create_operator(name, keepdims=keepdims)
    inputs = [random(shape, dtype)] + ([] if axes is None else [np.array(axes, np.int64)])
    torch_fn = torch_reduce(name, shape, axes, keepdims, noop=False)
    (Y,) = check_forward(op, inputs, torch_fn)
    assert isinstance(Y, np.ndarray) and Y.dtype == dtype
    grads = check_backward(op, inputs, torch_fn)
    assert len(grads) == len(inputs) and (axes is None or grads[1] is None)
    if dtype == np.float64:
        check_gradient(op, inputs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes", [None, []])
@pytest.mark.parametrize("name", list(OPS))
def test_reduce_noop_with_empty_axes(name, axes, dtype):
    op = d5ref.create_operator(name, noop_with_empty_axes=1, keepdims=0)
    X = random((2, 3), dtype)
    inputs = [X] + ([] if axes is None else [np.array(axes, np.int64)])
    Y = op.forward(*inputs)
    np.testing.assert_array_equal(Y, X)
    assert Y.dtype == dtype and not np.shares_memory(Y, X)
    check_backward(op, inputs, lambda x, *_: x.clone())
    if dtype == np.float64:
        check_gradient(op, inputs)


@pytest.mark.parametrize("name", list(OPS))
def test_reduce_noop_does_not_apply_to_given_axes(name):
    op = d5ref.create_operator(name, noop_with_empty_axes=1)
    assert op.forward(np.ones((2, 3)), np.array([1], np.int64)).shape == (2, 1)


@pytest.mark.parametrize("name", list(OPS))
def test_reduce_defaults(name):
    assert d5ref.create_operator(name).attributes == {"keepdims": 1,
                                                      "noop_with_empty_axes": 0}


@pytest.mark.parametrize("axes,message", [([3], r"\[-3, 2\]"), ([-4], r"\[-3, 2\]"),
                                          ([0, -3], "twice")])
@pytest.mark.parametrize("name", list(OPS))
def test_reduce_bad_axes(name, axes, message):
    with pytest.raises(ShapeError, match=message) as info:
        d5ref.create_operator(name).forward(np.zeros((2, 3, 4)), np.array(axes, np.int64))
    assert name in str(info.value)
