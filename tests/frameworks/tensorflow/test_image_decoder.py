"""ImageDecoder on the TensorFlow executor (``deep500/frameworks/tensorflow/ops/image.py``):
images Pillow encodes, decoded by TensorFlow, must equal ONNX's ReferenceEvaluator
(Pillow) pixel for pixel, JPEG included; formats TensorFlow cannot decode are refused,
a stream that is no image gives an empty image."""
from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

tf = pytest.importorskip("tensorflow")
Image = pytest.importorskip("PIL.Image")

import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.utils.errors import UnsupportedError  # noqa: E402

OPSET = onnx.defs.onnx_opset_version()


def encoded(fmt: str, **options) -> np.ndarray:
    """A 24×32 RGB test image (gradients and a square, so that JPEG's chroma subsampling
    and IDCT matter) in ``fmt``, as the uint8 stream ImageDecoder reads."""
    rows, cols = np.mgrid[0:24, 0:32]
    pixels = np.stack([rows * 10, cols * 7, (rows + cols) * 5], -1).astype(np.uint8)
    pixels[6:14, 8:20] = [250, 20, 90]
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt, **options)
    return np.frombuffer(buffer.getvalue(), np.uint8)


def model(pixel_format: str) -> onnx.ModelProto:
    node = helper.make_node("ImageDecoder", ["stream"], ["image"], pixel_format=pixel_format)
    graph = helper.make_graph(
        [node], "decode", [helper.make_tensor_value_info("stream", TensorProto.UINT8, [None])],
        [helper.make_tensor_value_info("image", TensorProto.UINT8, [None, None, None])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
@pytest.mark.parametrize("fmt,options", [("PNG", {}), ("BMP", {}), ("JPEG", {"quality": 75}),
                                         ("JPEG", {"quality": 95, "subsampling": 0})])
def test_decoded_pixels_equal_pillows(fmt, options, pixel_format):
    stream = encoded(fmt, **options)
    expected = ReferenceEvaluator(model(pixel_format)).run(None, {"stream": stream})[0]
    got = d5tf.from_onnx(model(pixel_format)).inference({"stream": stream})["image"]
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, expected)


def test_a_traced_function_decodes_too():
    stream = encoded("PNG")
    expected = ReferenceEvaluator(model("RGB")).run(None, {"stream": stream})[0]
    got = d5tf.from_onnx(model("RGB"), mode="function").inference({"stream": stream})
    np.testing.assert_array_equal(got["image"], expected)


def test_a_format_tensorflow_cannot_decode_is_refused():
    with pytest.raises(UnsupportedError, match="TIFF"):
        d5tf.from_onnx(model("RGB")).inference({"stream": encoded("TIFF")})


def test_a_stream_that_is_no_image_gives_an_empty_image():
    got = d5tf.from_onnx(model("Grayscale")).inference(
        {"stream": np.frombuffer(b"no image here", np.uint8)})["image"]
    assert got.shape == (0, 0, 1) and got.dtype == np.uint8
