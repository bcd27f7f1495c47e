"""Reference activations (LeakyRelu, Sigmoid, Tanh), binary arithmetic (Add, Sub, Mul,
Div) and variadic Sum against PyTorch and finite differences."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.op_checks import (check_backward, check_forward,
                                                  check_gradient, torch)

F = torch.nn.functional
DTYPES = [np.float32, np.float64]


def away_from_zero(rng, shape, dtype, low=0.1, high=2.0):
    """Values with |x| in [low, high], random signs: no kinks, no division by ~0."""
    values = rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)
    return values.astype(dtype)


# -- activations -----------------------------------------------------------------------
ACTIVATIONS = [
    ("LeakyRelu", {}, lambda x: F.leaky_relu(x, 0.01)),
    ("LeakyRelu", {"alpha": 0.2}, lambda x: F.leaky_relu(x, 0.2)),
    ("Sigmoid", {}, torch.sigmoid),
    ("Tanh", {}, torch.tanh),
]
ACTIVATION_SHAPES = [(), (7,), (3, 4), (2, 3, 4, 5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ACTIVATION_SHAPES, ids=str)
@pytest.mark.parametrize("op_type,attrs,torch_fn", ACTIVATIONS,
                         ids=[f"{a[0]}{a[1] or ''}" for a in ACTIVATIONS])
def test_activation_forward_backward(op_type, attrs, torch_fn, shape, dtype):
    rng = np.random.default_rng(1)
    x = away_from_zero(rng, shape, dtype, 0.05, 4.0)
    op = create_operator(op_type, **attrs)
    (y,) = check_forward(op, [x], torch_fn)
    assert y.dtype == dtype and isinstance(y, np.ndarray)
    (dx,) = check_backward(op, [x], torch_fn)
    assert dx.dtype == dtype


@pytest.mark.parametrize("op_type,attrs,torch_fn", ACTIVATIONS,
                         ids=[f"{a[0]}{a[1] or ''}" for a in ACTIVATIONS])
def test_activation_finite_differences(op_type, attrs, torch_fn):
    x = away_from_zero(np.random.default_rng(2), (3, 5), np.float64, 0.05, 3.0)
    check_gradient(create_operator(op_type, **attrs), [x])


@pytest.mark.parametrize("dtype", DTYPES)
def test_sigmoid_is_stable_for_large_inputs(dtype):
    x = np.array([-1000.0, -100.0, -30.0, 0.0, 30.0, 100.0, 1000.0], dtype)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = create_operator("Sigmoid").forward(x)
    # atol: PyTorch may flush sigmoid(-100) in float32 to 0 where NumPy keeps a subnormal.
    np.testing.assert_allclose(y, torch.sigmoid(torch.from_numpy(x)).numpy(), rtol=1e-6,
                               atol=1e-30)
    assert y[0] == 0 and y[-1] == 1 and 0 < y[2] < 1e-12
    assert np.all(np.isfinite(y))


def test_activation_upstream_none_gives_zero_gradient():
    x = np.ones((2, 3), np.float32)
    op = create_operator("Tanh")
    (dx,) = op.backward([None], [x], [op.forward(x)])
    assert dx.shape == x.shape and not dx.any()


# -- binary arithmetic -----------------------------------------------------------------
BINARY = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}
BROADCASTS = [
    ((3, 4), (3, 4)),            # same shape
    ((3, 4), ()),                # scalar right
    ((), (2, 3)),                # scalar left
    ((2, 3, 4), (4,)),           # rank-changing, trailing axis
    ((4, 1), (3,)),              # both sides broadcast
    ((2, 1, 4), (3, 1)),         # rank-changing and size-1 on both sides
    ((1, 3, 1), (2, 1, 5)),      # every axis broadcast somewhere
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("op_type", sorted(BINARY))
def test_binary_forward_backward(op_type, shapes, dtype):
    rng = np.random.default_rng(3)
    a = away_from_zero(rng, shapes[0], dtype, 0.5, 2.0)
    b = away_from_zero(rng, shapes[1], dtype, 0.5, 2.0)
    op = create_operator(op_type)
    (c,) = check_forward(op, [a, b], BINARY[op_type])
    assert isinstance(c, np.ndarray) and c.dtype == dtype
    da, db = check_backward(op, [a, b], BINARY[op_type])
    assert da.shape == a.shape and db.shape == b.shape
    assert da.dtype == dtype and db.dtype == dtype


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((2, 1, 3), (4, 1)), ((), (3,))],
                         ids=str)
@pytest.mark.parametrize("op_type", sorted(BINARY))
def test_binary_finite_differences(op_type, shapes):
    rng = np.random.default_rng(4)
    a = away_from_zero(rng, shapes[0], np.float64, 0.5, 2.0)
    b = away_from_zero(rng, shapes[1], np.float64, 0.5, 2.0)
    check_gradient(create_operator(op_type), [a, b])


@pytest.mark.parametrize("op_type", sorted(BINARY))
def test_binary_rejects_shapes_that_do_not_broadcast(op_type):
    with pytest.raises(ShapeError, match=rf"{op_type}.*\(2, 3\).*\(4,\).*broadcast"):
        create_operator(op_type).forward(np.ones((2, 3)), np.ones(4))


def test_binary_rejects_mixed_dtypes():
    with pytest.raises(Deep500Error, match="Add.*dtype"):
        create_operator("Add").forward(np.ones(3, np.float32), np.ones(3, np.float64))


def test_add_gradients_are_not_aliased():
    a = np.ones((2, 3), np.float32)
    b = np.ones((2, 3), np.float32)
    op = create_operator("Add")
    upstream = np.full((2, 3), 2.0, np.float32)
    da, db = op.backward([upstream], [a, b], [op.forward(a, b)])
    assert da is not upstream and db is not upstream and da is not db
    da += 1
    assert np.all(db == 2) and np.all(upstream == 2)


def test_integer_div_truncates_toward_zero():
    out = create_operator("Div").forward(np.array([7, -7, 6], np.int64),
                                         np.array([2, 2, -4], np.int64))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [3, -3, -1])


# -- Sum ---------------------------------------------------------------------------------
SUM_SHAPES = [
    [(3, 4)],
    [(3, 4), (3, 4)],
    [(2, 3, 4), (4,), ()],
    [(3, 1), (1, 5), (2, 1, 1), (5,)],
]


def torch_sum(*tensors):
    result = tensors[0]
    for t in tensors[1:]:
        result = result + t
    return result


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", SUM_SHAPES, ids=str)
def test_sum_forward_backward(shapes, dtype):
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    op = create_operator("Sum")
    (y,) = check_forward(op, inputs, torch_sum)
    assert y.dtype == dtype
    grads = check_backward(op, inputs, torch_sum)
    assert [g.dtype for g in grads] == [dtype] * len(inputs)


@pytest.mark.parametrize("shapes", SUM_SHAPES[1:], ids=str)
def test_sum_finite_differences(shapes):
    rng = np.random.default_rng(6)
    check_gradient(create_operator("Sum"), [rng.standard_normal(s) for s in shapes])


def test_sum_rejects_shapes_that_do_not_broadcast():
    with pytest.raises(ShapeError, match="Sum.*broadcast"):
        create_operator("Sum").forward(np.ones((2, 3)), np.ones(3), np.ones((4, 1, 2)))
