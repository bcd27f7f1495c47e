"""Reference DFT against onnx's ReferenceEvaluator (opset 17: axis attribute, opset 20:
axis input), its backward against finite differences, and its input checks."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_gradient

CASES = [  # (input shape, axis, dft_length, inverse, onesided)
    ((2, 6, 1), 1, None, 0, 0),
    ((2, 6, 2), -2, None, 0, 0),
    ((2, 5, 1), 1, None, 0, 1),
    ((2, 5, 2), 1, 8, 0, 1),      # padded, complex, one-sided
    ((3, 4, 2, 2), 1, 3, 0, 0),   # truncated, a middle axis
    ((2, 6, 2), 1, None, 1, 0),
    ((2, 4, 2), 1, None, 1, 1),   # irfft: 6 real samples from 4 frequencies
    ((2, 4, 2), 1, 7, 1, 1),      # irfft, odd length
    ((2, 4, 1), 1, 5, 1, 1),      # irfft from a real spectrum
    ((4, 3, 2), 0, None, 1, 0),
]


def signal(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("shape,axis,length,inverse,onesided", CASES)
@pytest.mark.parametrize("opset", [17, 20])
def test_forward_matches_onnx(shape, axis, length, inverse, onesided, opset):
    x = signal(shape, np.float32)
    attributes = {"inverse": inverse, "onesided": onesided}
    length = None if length is None else np.array(length, np.int64)
    if opset == 17:
        op = create_operator("DFT", axis=axis, **attributes)
        got = op.forward(x, length)
        (want,) = onnx_run("DFT", [x, length], {**attributes, "axis": axis}, opset=17)
    else:
        op = create_operator("DFT", **attributes)
        got = op.forward(x, length, np.array(axis, np.int64))
        (want,) = onnx_run("DFT", [x, length, np.array(axis, np.int64)], attributes,
                           opset=20)
    assert got.shape == want.shape and got.dtype == want.dtype
    # sums of up to 8 O(1) terms in float32 (both compute in float64 and round)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_default_axis_of_opset_20_is_the_last_signal_axis():
    x = signal((2, 3, 5, 2), np.float64)
    got = create_operator("DFT").forward(x)
    want = np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=-1)
    np.testing.assert_allclose(got, np.stack([want.real, want.imag], -1), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("shape,axis,length,inverse,onesided", CASES)
def test_backward_matches_finite_differences(shape, axis, length, inverse, onesided):
    op = create_operator("DFT", inverse=inverse, onesided=onesided)
    x = signal(shape, np.float64, seed=1)
    length = None if length is None else np.array(length, np.int64)
    check_gradient(op, [x, length, np.array(axis, np.int64)], wrt=[0])


def test_bad_inputs_say_what_is_wrong():
    op = create_operator("DFT")
    with pytest.raises(ShapeError, match="real, imaginary"):
        op.forward(np.zeros((2, 4, 3), np.float32))
    with pytest.raises(ShapeError, match="out of range"):
        op.forward(np.zeros((2, 4, 2), np.float32), None, np.array(-1))
    with pytest.raises(ShapeError, match="dft_length must be one integer"):
        op.forward(np.zeros((2, 4, 2), np.float32), np.array([2.0]))
