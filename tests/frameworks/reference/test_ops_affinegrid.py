"""Reference AffineGrid against onnx's ReferenceEvaluator and PyTorch's affine_grid
(independent implementations), its backward against PyTorch autograd and finite
differences, and its input checks."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_backward, check_gradient, torch

CASES = [  # (theta shape, size)
    ((2, 2, 3), [2, 3, 4, 5]),
    ((1, 2, 3), [1, 1, 1, 6]),     # an axis of length 1
    ((2, 3, 4), [2, 1, 3, 2, 4]),
]


def theta_of(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("shape,size", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_matches_onnx_and_torch(shape, size, align_corners, dtype):
    theta, size = theta_of(shape, dtype), np.array(size, np.int64)
    grid = create_operator("AffineGrid", align_corners=align_corners).forward(theta, size)
    assert grid.dtype == dtype
    # a sum of spatial-rank + 1 products of O(1) values: a few ulps of the dtype compared
    # (onnx's reference computes in float32 whatever theta's type)
    with torch.no_grad():
        expected = torch.nn.functional.affine_grid(
            torch.from_numpy(theta), [int(v) for v in size],
            align_corners=bool(align_corners)).numpy()
    tol = 8 * np.finfo(dtype).eps
    np.testing.assert_allclose(grid, expected, rtol=tol, atol=tol)
    if not (align_corners and 1 in size[2:]):  # undefined by the spec; PyTorch's choice
        (oracle,) = onnx_run("AffineGrid", [theta, size], {"align_corners": align_corners})
        tol = 8 * np.finfo(oracle.dtype).eps
        assert grid.shape == oracle.shape
        np.testing.assert_allclose(grid, oracle, rtol=tol, atol=tol)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("shape,size", CASES[::2])
def test_backward_matches_autograd_and_finite_differences(shape, size, align_corners):
    op = create_operator("AffineGrid", align_corners=align_corners)
    theta, size = theta_of(shape, np.float64, seed=1), np.array(size, np.int64)
    check_backward(op, [theta, size], lambda t, s: torch.nn.functional.affine_grid(
        t, [int(v) for v in s], align_corners=bool(align_corners)), wrt=[0])
    check_gradient(op, [theta, size], wrt=[0])


def test_bad_inputs_say_what_is_wrong():
    op = create_operator("AffineGrid")
    with pytest.raises(ShapeError, match=r"\(N, 2, 3\) or \(N, 3, 4\)"):
        op.forward(np.zeros((1, 2, 2), np.float32), np.array([1, 1, 2, 2]))
    with pytest.raises(ShapeError, match="must have 4 values"):
        op.forward(np.zeros((1, 2, 3), np.float32), np.array([1, 1, 2, 2, 2]))
    with pytest.raises(ShapeError, match="differs from theta"):
        op.forward(np.zeros((1, 2, 3), np.float32), np.array([2, 1, 2, 2]))
