"""Resize's ``axes`` follow ONNX's rule for a list of axes (utils/onnx_interop/axes.py):
each in [-rank, rank), negative ones from the end, none twice; the plans then cover the
named axes only."""
import numpy as np
import pytest

from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.resize import RESIZE_DEFAULTS, resize_plans

SHAPE = (2, 3, 4, 5)


def plans(axes, scales):
    return resize_plans("Resize", {**RESIZE_DEFAULTS, "axes": axes}, SHAPE,
                        scales=np.asarray(scales, np.float32))


def test_negative_axes_count_from_the_end():
    negative, positive = plans([-1, 2], [2.0, 0.5]), plans([3, 2], [2.0, 0.5])
    assert [p.axis for p in negative] == [p.axis for p in positive] == [3, 2]
    for a, b in zip(negative, positive):
        np.testing.assert_array_equal(a.index, b.index)   # exact: integer gathers
    np.testing.assert_array_equal(negative[0].index, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4])


@pytest.mark.parametrize("axes,message", [
    ([4], r"^Resize: axes \[4\] must lie in \[-4, 3\] for X of shape \[2, 3, 4, 5\]$"),
    ([1, -3], r"^Resize: axes \[1, -3\] name an axis twice$"),
])
def test_axes_out_of_range_or_named_twice_are_refused(axes, message):
    with pytest.raises(ShapeError, match=message):
        plans(axes, [2.0] * len(axes))
