"""Reference SwiGLU against onnx's ReferenceEvaluator and PyTorch (silu-gated product),
its backward against PyTorch autograd and finite differences, and its input checks."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_backward, check_gradient, torch


def pair(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (3 * rng.standard_normal(shape)).astype(dtype), rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("alpha", [1.0, 1.702, -0.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_matches_onnx(alpha, dtype):
    A, B = pair((2, 3, 5), dtype)
    alpha = float(np.float32(alpha))   # what an ONNX float attribute holds
    got = create_operator("SwiGLU", alpha=alpha).forward(A, B)
    (want,) = onnx_run("SwiGLU", [A, B], {"alpha": alpha})
    assert got.dtype == want.dtype == dtype
    # a handful of roundings of the dtype (onnx rounds the sigmoid to the dtype first)
    tol = 16 * np.finfo(dtype).eps
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_backward_matches_autograd_and_finite_differences(alpha):
    op = create_operator("SwiGLU", alpha=alpha)
    A, B = pair((3, 4), np.float64, seed=2)
    check_backward(op, [A, B], lambda a, b: a * torch.sigmoid(alpha * a) * b)
    check_gradient(op, [A, B])


def test_bad_inputs_say_what_is_wrong():
    op = create_operator("SwiGLU")
    with pytest.raises(ShapeError, match="does not broadcast"):
        op.forward(np.zeros((2, 4), np.float32), np.zeros((1, 4), np.float32))
    with pytest.raises(ShapeError, match="different dtypes"):
        op.forward(np.zeros(3, np.float32), np.zeros(3, np.float64))
    with pytest.raises(ShapeError, match="not allowed"):
        op.forward(np.zeros(3, np.int64), np.zeros(3, np.int64))
