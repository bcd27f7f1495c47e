"""Reference DeformConv against onnx's ReferenceEvaluator (2-D: strides, pads,
dilations, groups, offset groups, mask, bias), against the reference Conv when the
offsets are zero (1-D and 3-D), its backward w.r.t. every input against finite
differences, and its input checks."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_gradient

CASES = [  # (X shape, W shape, attributes, with bias, with mask)
    ((1, 2, 5, 5), (3, 2, 3, 3), {}, False, False),
    ((2, 4, 6, 5), (4, 2, 2, 3), dict(group=2, offset_group=2, strides=[2, 1],
                                      pads=[1, 0, 1, 2], dilations=[1, 2]), True, True),
    ((1, 3, 4, 4), (2, 3, 2, 2), dict(pads=[1, 1, 1, 1]), True, True),
]


def inputs_of(x_shape, w_shape, attributes, bias, mask, dtype, seed=0):
    rng = np.random.default_rng(seed)
    n = len(x_shape) - 2
    og = attributes.get("offset_group", 1)
    strides = attributes.get("strides", [1] * n)
    dil = attributes.get("dilations", [1] * n)
    pads = attributes.get("pads", [0] * 2 * n)
    out = [(x_shape[2 + d] + pads[d] + pads[n + d] - (w_shape[2 + d] - 1) * dil[d] - 1)
           // strides[d] + 1 for d in range(n)]
    taps = int(np.prod(w_shape[2:]))
    X = rng.standard_normal(x_shape).astype(dtype)
    W = rng.standard_normal(w_shape).astype(dtype)
    # offsets up to ±2 pixels: samples in and out of the image, off integer coordinates
    offset = rng.uniform(-2, 2, [x_shape[0], og * taps * n] + out).astype(dtype)
    B = rng.standard_normal(w_shape[0]).astype(dtype) if bias else None
    M = rng.uniform(0, 1, [x_shape[0], og * taps] + out).astype(dtype) if mask else None
    return [X, W, offset, B, M]


@pytest.mark.parametrize("x_shape,w_shape,attributes,bias,mask", CASES)
def test_forward_matches_onnx(x_shape, w_shape, attributes, bias, mask):
    inputs = inputs_of(x_shape, w_shape, attributes, bias, mask, np.float32)
    got = create_operator("DeformConv", **attributes).forward(*inputs)
    (want,) = onnx_run("DeformConv", inputs, attributes)
    assert got.shape == want.shape and got.dtype == want.dtype
    # sums of up to 36 weighted float32 products of O(1) values
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape,attributes", [
    ((2, 2, 7), (4, 1, 3), dict(group=2, strides=[2], pads=[1, 2], dilations=[2])),
    ((1, 2, 4, 3, 5), (2, 2, 2, 2, 3), dict(pads=[1, 0, 1, 0, 1, 1])),
])
def test_zero_offsets_are_a_convolution(x_shape, w_shape, attributes):
    X, W, offset, B, _ = inputs_of(x_shape, w_shape, attributes, True, False, np.float64)
    got = create_operator("DeformConv", **attributes).forward(X, W, 0 * offset, B)
    want = create_operator("Conv", **attributes).forward(X, W, B)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("x_shape,w_shape,attributes,bias,mask", CASES[1:] + [
    ((1, 2, 6), (2, 2, 3), dict(pads=[1, 1]), True, True),
    ((1, 2, 3, 3, 4), (2, 1, 2, 2, 2), dict(group=2, offset_group=2), False, True),
])
def test_backward_matches_finite_differences(x_shape, w_shape, attributes, bias, mask):
    op = create_operator("DeformConv", **attributes)
    inputs = inputs_of(x_shape, w_shape, attributes, bias, mask, np.float64, seed=5)
    check_gradient(op, inputs)


def test_bad_inputs_say_what_is_wrong():
    X, W, offset, _, _ = inputs_of((1, 2, 5, 5), (3, 2, 3, 3), {}, False, False, np.float32)
    with pytest.raises(ShapeError, match="offset must have shape"):
        create_operator("DeformConv").forward(X, W, offset[:, :4])
    with pytest.raises(ShapeError, match="group"):
        create_operator("DeformConv", group=2).forward(X, W, offset)
    with pytest.raises(ShapeError, match="offset_group=3"):
        create_operator("DeformConv", offset_group=3).forward(X, W, offset)
    with pytest.raises(ShapeError, match="kernel_shape"):
        create_operator("DeformConv", kernel_shape=[2, 2]).forward(X, W, offset)
