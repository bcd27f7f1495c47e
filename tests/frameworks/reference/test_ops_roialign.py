"""Reference RoiAlign against onnx's ReferenceEvaluator (both coordinate modes, avg and
max, fixed and adaptive sampling), its backward w.r.t. X against finite differences, and
its input checks."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_gradient

# Regions inside, across the border, partly more than a pixel outside, degenerate.
ROIS = np.array([[0.0, 0.0, 4.0, 5.0], [1.3, 0.7, 6.9, 4.2], [-2.5, 3.0, 3.0, 8.5],
                 [2.0, 2.0, 2.0, 2.0]])
BATCH = np.array([0, 1, 1, 0], np.int64)
ATTRIBUTES = [
    dict(output_height=2, output_width=3, sampling_ratio=2),
    dict(output_height=3, output_width=2, sampling_ratio=0, spatial_scale=0.5),
    dict(output_height=1, output_width=1, sampling_ratio=1),
]


def image(dtype, seed=0):
    return np.random.default_rng(seed).standard_normal((2, 3, 6, 7)).astype(dtype)


@pytest.mark.parametrize("attributes", ATTRIBUTES)
@pytest.mark.parametrize("coordinates", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_forward_matches_onnx(attributes, coordinates, mode):
    X = image(np.float32)
    attributes = {**attributes, "coordinate_transformation_mode": coordinates, "mode": mode}
    got = create_operator("RoiAlign", **attributes).forward(X, ROIS.astype(np.float32), BATCH)
    (want,) = onnx_run("RoiAlign", [X, ROIS.astype(np.float32), BATCH], attributes)
    assert got.shape == want.shape and got.dtype == want.dtype
    # onnx accumulates in float32 over at most 4 samples x 4 corners
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_absent_coordinate_mode_is_opset_10_output_half_pixel():
    X, rois = image(np.float64), ROIS[:3]
    old = create_operator("RoiAlign", output_height=2, output_width=2)
    new = create_operator("RoiAlign", output_height=2, output_width=2,
                          coordinate_transformation_mode="output_half_pixel")
    np.testing.assert_array_equal(old.forward(X, rois, BATCH[:3]),
                                  new.forward(X, rois, BATCH[:3]))


@pytest.mark.parametrize("attributes", ATTRIBUTES[:2])
@pytest.mark.parametrize("coordinates", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_backward_matches_finite_differences(attributes, coordinates, mode):
    op = create_operator("RoiAlign", coordinate_transformation_mode=coordinates, mode=mode,
                         **attributes)
    # max mode is piecewise linear: random data has no ties within the step
    check_gradient(op, [image(np.float64, seed=3), ROIS, BATCH], wrt=[0])


def test_bad_inputs_say_what_is_wrong():
    op = create_operator("RoiAlign")
    X = image(np.float32)
    with pytest.raises(ShapeError, match=r"\(num_rois, 4\)"):
        op.forward(X, np.zeros((2, 5), np.float32), np.zeros(2, np.int64))
    with pytest.raises(ShapeError, match="one per roi"):
        op.forward(X, np.zeros((2, 4), np.float32), np.zeros(3, np.int64))
    with pytest.raises(ShapeError, match=r"lie in \[0, 2\)"):
        op.forward(X, np.zeros((1, 4), np.float32), np.array([2]))
    with pytest.raises(ShapeError, match="'avg' or 'max'"):
        create_operator("RoiAlign", mode="min").forward(X, ROIS, BATCH)
