"""Gemm, MatMul and Relu against PyTorch and finite differences."""
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
    check_forward(op, inputs, torch_fn)
    check_backward(op, inputs, torch_fn)
    if dtype == np.float64:
        check_gradient(op, inputs)


# -- Gemm ------------------------------------------------------------------------------
M, K, N = 3, 4, 2
C_SHAPES = [None, (M, N), (N,), (1, N), (M, 1), (1, 1), ()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c_shape", C_SHAPES, ids=str)
@pytest.mark.parametrize("transA,transB", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(transA, transB, c_shape, dtype):
    alpha, beta = (1.0, 1.0) if transA == transB else (0.5, -2.0)
    op = d5ref.create_operator("Gemm", transA=transA, transB=transB, alpha=alpha, beta=beta)
    A = random((K, M) if transA else (M, K), dtype, 1)
    B = random((N, K) if transB else (K, N), dtype, 2)
    inputs = [A, B] + ([] if c_shape is None else [random(c_shape, dtype, 3)])

    def torch_gemm(A, B, C=None):
        Y = alpha * ((A.T if transA else A) @ (B.T if transB else B))
        return Y if C is None else Y + beta * C

    check_all(op, inputs, torch_gemm, dtype)
    assert op.forward(*inputs).dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_against_addmm(dtype):
    op = d5ref.create_operator("Gemm", alpha=0.25, beta=3.0)
    inputs = [random((5, 7), dtype, 1), random((7, 6), dtype, 2), random((6,), dtype, 3)]
    check_forward(op, inputs, lambda A, B, C: torch.addmm(C, A, B, beta=3.0, alpha=0.25))


def test_gemm_beta_zero_ignores_c():
    op = d5ref.create_operator("Gemm", beta=0.0)
    A, B = random((2, 3), np.float64), random((3, 4), np.float64)
    np.testing.assert_allclose(op.forward(A, B, np.full((2, 4), np.nan)), A @ B)
    _, _, dC = op.backward([np.ones((2, 4))], [A, B, np.ones((2, 4))], [A @ B])
    np.testing.assert_array_equal(dC, 0.0)


@pytest.mark.parametrize("attributes,shapes,message", [
    ({}, [(2, 3), (4, 5)], "inner dimensions"),
    ({"transA": 1}, [(2, 3), (3, 5)], "inner dimensions"),   # A' is 3x2
    ({}, [(2, 3), (3, 4), (3, 4)], "does not broadcast"),
    ({}, [(2, 3), (3, 4), (2, 2, 4)], "does not broadcast"),
    ({}, [(3,), (3, 4)], "matrices"),
])
def test_gemm_shape_errors(attributes, shapes, message):
    op = d5ref.create_operator("Gemm", **attributes)
    with pytest.raises(ShapeError, match=message) as info:
        op.forward(*[np.ones(s, np.float32) for s in shapes])
    assert "Gemm" in str(info.value)


# -- MatMul ----------------------------------------------------------------------------
MATMUL_SHAPES = [
    ((3,), (3,)),                # dot product, 0-D result
    ((3,), (3, 4)),              # vector-matrix
    ((2, 3), (3,)),              # matrix-vector
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),         # batched A, broadcast B
    ((2, 3), (5, 3, 4)),         # broadcast A, batched B
    ((5, 2, 3), (5, 3, 4)),
    ((2, 1, 2, 3), (3, 3, 4)),   # batch dims broadcast both ways
    ((1, 2, 3), (4, 3, 1)),
    ((4, 2, 3), (3,)),           # batched matrix-vector
    ((3,), (2, 3, 4)),           # vector-batched matrix
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes, dtype):
    op = d5ref.create_operator("MatMul")
    inputs = [random(shapes[0], dtype, 1), random(shapes[1], dtype, 2)]
    check_all(op, inputs, torch.matmul, dtype)
    Y = op.forward(*inputs)
    assert isinstance(Y, np.ndarray) and Y.dtype == dtype


@pytest.mark.parametrize("shapes,message", [
    (((2, 3), (4, 5)), "inner dimensions"),
    (((3,), (4,)), "inner dimensions"),
    (((2, 2, 3), (3, 3, 4)), "batch dimensions"),
    (((), (3,)), "at least one dimension"),
])
def test_matmul_shape_errors(shapes, message):
    op = d5ref.create_operator("MatMul")
    with pytest.raises(ShapeError, match=message) as info:
        op.forward(np.ones(shapes[0]), np.ones(shapes[1]))
    assert "MatMul" in str(info.value)


def test_matmul_dtype_mismatch():
    with pytest.raises(Deep500Error, match="dtype"):
        d5ref.create_operator("MatMul").forward(np.ones((2, 3), np.float32),
                                                np.ones((3, 2), np.float64))


# -- Relu ------------------------------------------------------------------------------
def away_from_zero(shape, dtype, seed=0):
    """Values with |x| in [0.1, 1], so that finite differences never straddle the kink."""
    rng = np.random.default_rng(seed)
    return (rng.choice([-1.0, 1.0], shape) * rng.uniform(0.1, 1.0, shape)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (7,), (3, 4), (2, 3, 2, 2)], ids=str)
def test_relu(shape, dtype):
    op = d5ref.create_operator("Relu")
    check_all(op, [away_from_zero(shape, dtype)], torch.relu, dtype)


def test_relu_gradient_at_zero_is_zero():
    # PyTorch's convention (and ONNX's training convention): no gradient at exactly 0.
    x = np.array([-1.0, 0.0, 1.0])
    dX, = d5ref.create_operator("Relu").backward([np.ones(3)], [x], [np.maximum(x, 0)])
    np.testing.assert_array_equal(dX, [0.0, 0.0, 1.0])
