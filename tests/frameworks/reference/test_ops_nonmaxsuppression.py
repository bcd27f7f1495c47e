"""Reference NonMaxSuppression against onnx's ReferenceEvaluator (both box formats,
thresholds, limits, ties, several batches and classes) and its input checks."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run


def problem(seed, center_point_box, batches=2, classes=3, count=12):
    rng = np.random.default_rng(seed)
    if center_point_box:
        boxes = np.concatenate([rng.uniform(0, 10, (batches, count, 2)),
                                rng.uniform(0, 4, (batches, count, 2))], -1)
    else:   # corners in either order, some with no area
        boxes = rng.uniform(0, 10, (batches, count, 4))
        boxes[:, :2, 2] = boxes[:, :2, 0]
    scores = rng.uniform(0, 1, (batches, classes, count))
    scores[:, :, 3] = scores[:, :, 4]          # a tie
    boxes[:, 5] = boxes[:, 6]                  # identical boxes
    return boxes.astype(np.float32), scores.astype(np.float32)


@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("limit,iou,floor", [(3, 0.5, None), (20, 0.0, 0.3),
                                              (5, 0.2, 0.9), (0, 0.5, None)])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_onnx(center_point_box, limit, iou, floor, seed):
    boxes, scores = problem(seed, center_point_box)
    inputs = [boxes, scores, np.array([limit], np.int64), np.array([iou], np.float32),
              None if floor is None else np.array([floor], np.float32)]
    got = create_operator("NonMaxSuppression", center_point_box=center_point_box).forward(
        *inputs)
    (want,) = onnx_run("NonMaxSuppression", inputs, {"center_point_box": center_point_box})
    assert got.dtype == np.int64 and got.shape == (len(want), 3)
    np.testing.assert_array_equal(got, want.reshape(-1, 3))
    if limit:
        assert len(got) > 0


def test_omitted_limit_selects_nothing_and_there_is_no_gradient():
    boxes, scores = problem(0, 0)
    op = create_operator("NonMaxSuppression")
    out = op.forward(boxes, scores)
    assert out.shape == (0, 3)
    assert op.backward([None], [boxes, scores], [out]) == [None, None]


def test_bad_inputs_say_what_is_wrong():
    op = create_operator("NonMaxSuppression")
    with pytest.raises(ShapeError, match=r"\(batches, boxes, 4\)"):
        op.forward(np.zeros((1, 3, 5), np.float32), np.zeros((1, 1, 3), np.float32))
    with pytest.raises(ShapeError, match=r"\(batches, classes, boxes\)"):
        op.forward(np.zeros((1, 3, 4), np.float32), np.zeros((1, 1, 4), np.float32))
    with pytest.raises(ShapeError, match="one value"):
        op.forward(np.zeros((1, 3, 4), np.float32), np.zeros((1, 1, 3), np.float32),
                   np.array([1, 2]))
