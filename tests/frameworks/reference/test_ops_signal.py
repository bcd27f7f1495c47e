"""The signal family's generators and STFT: HannWindow, HammingWindow, BlackmanWindow,
MelWeightMatrix and STFT against ONNX's ReferenceEvaluator; STFT's gradients (signal and
window) against central finite differences in float64."""
import numpy as np
import pytest
from onnx import TensorProto

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_gradient

WINDOWS = ["HannWindow", "HammingWindow", "BlackmanWindow"]


@pytest.mark.parametrize("op_type", WINDOWS)
@pytest.mark.parametrize("size", [1, 2, 7, 10])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("datatype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_windows_match_onnx(op_type, size, periodic, datatype):
    attributes = {"periodic": periodic, "output_datatype": datatype}
    size = np.array(size, np.int64)
    if size == 1 and not periodic:
        pytest.skip("a one-point symmetric window divides by zero in ONNX's evaluator")
    expected, = onnx_run(op_type, [size], attributes)
    got = create_operator(op_type, **attributes).forward(size)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_the_hann_window_is_numpys_symmetric_hanning():
    np.testing.assert_allclose(create_operator("HannWindow", periodic=0).forward(
        np.array(9, np.int64)), np.hanning(9).astype(np.float32), rtol=0, atol=1e-7)


@pytest.mark.parametrize("args", [(8, 16, 8000, 0.0, 4000.0), (4, 32, 16000, 300.0, 7000.0),
                                  (10, 64, 22050, 20.0, 11000.0)])
def test_mel_weight_matrix_matches_onnx(args):
    inputs = [np.array(args[0], np.int64), np.array(args[1], np.int64),
              np.array(args[2], np.int64), np.float32(args[3]), np.float32(args[4])]
    expected, = onnx_run("MelWeightMatrix", inputs)
    got = create_operator("MelWeightMatrix").forward(*inputs)
    assert got.shape == (args[1] // 2 + 1, args[0]) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def signal(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


STFT_CASES = [  # (signal shape, frame_step, window length or None, frame_length, onesided)
    ((2, 32, 1), 8, 16, None, 1), ((1, 30, 1), 5, None, np.int64(10), 1),
    ((2, 20, 2), 4, 8, np.int64(8), 0), ((1, 16, 1), 3, 6, None, 0),
    ((1, 12, 2), 12, None, None, 1)]


@pytest.mark.parametrize("shape,step,window,frame_length,onesided", STFT_CASES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stft_matches_onnx(shape, step, window, frame_length, onesided, dtype):
    x = signal(shape, dtype)
    w = None if window is None else np.hanning(window).astype(dtype)
    inputs = [x, np.array(step, np.int64), w, frame_length]
    expected, = onnx_run("STFT", inputs, {"onesided": onesided})
    got = create_operator("STFT", onesided=onesided).forward(*inputs)
    assert got.dtype == dtype and got.shape == expected.shape
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("shape,step,window,frame_length,onesided", STFT_CASES, ids=str)
def test_stft_gradients(shape, step, window, frame_length, onesided):
    x = signal(shape)
    w = None if window is None else signal(window, seed=1)
    check_gradient(create_operator("STFT", onesided=onesided),
                   [x, np.array(step, np.int64), w, frame_length])


def test_stft_errors_name_the_frame():
    op = create_operator("STFT")
    with pytest.raises(ShapeError, match="frame_length 40 must be in"):
        op.forward(signal((1, 30, 1)), np.array(5, np.int64), None, np.int64(40))
    with pytest.raises(ShapeError, match=r"signal must be \[batch, length, 1 or 2\]"):
        op.forward(signal((30, 1)), np.array(5, np.int64))
