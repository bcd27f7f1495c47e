"""ImageDecoder: lossless formats give back the encoded pixels exactly; every format
(lossy ones included) equals ONNX's ReferenceEvaluator, which decodes with Pillow too."""
import io

import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error
from tests.frameworks.reference.onnx_oracle import onnx_run

Image = pytest.importorskip("PIL.Image")
features = pytest.importorskip("PIL.features")

PIXELS = np.random.default_rng(0).integers(0, 256, (12, 10, 3), dtype=np.uint8)
LOSSLESS = {"PNG": "png", "BMP": "bmp", "TIFF": "tiff", "PPM": "ppm"}
LOSSY = {"JPEG": "jpg", "JPEG2000": "jpg_2000", "WEBP": "webp"}


def encoded(pixels, format_name) -> np.ndarray:
    stream = io.BytesIO()
    Image.fromarray(pixels).save(stream, format=format_name)
    return np.frombuffer(stream.getvalue(), np.uint8)


@pytest.mark.parametrize("format_name", sorted(LOSSLESS))
def test_lossless_formats_give_back_the_pixels(format_name):
    stream = encoded(PIXELS, format_name)
    np.testing.assert_array_equal(create_operator("ImageDecoder").forward(stream), PIXELS)
    bgr = create_operator("ImageDecoder", pixel_format="BGR").forward(stream)
    np.testing.assert_array_equal(bgr, PIXELS[..., ::-1])


@pytest.mark.parametrize("format_name", sorted(LOSSLESS) + sorted(LOSSY))
@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_every_format_matches_onnx(format_name, pixel_format):
    feature = LOSSY.get(format_name)
    if feature and feature != "jpg" and not features.check(feature):
        pytest.skip(f"Pillow was built without {feature}")
    stream = encoded(PIXELS, format_name)
    expected, = onnx_run("ImageDecoder", [stream], {"pixel_format": pixel_format})
    got = create_operator("ImageDecoder", pixel_format=pixel_format).forward(stream)
    assert got.dtype == np.uint8 and got.shape == (12, 10, 1 if pixel_format == "Grayscale"
                                                   else 3)
    np.testing.assert_array_equal(got, expected)


def test_an_undecodable_stream_gives_an_empty_image():
    garbage = np.frombuffer(b"not an image at all", np.uint8)
    assert create_operator("ImageDecoder").forward(garbage).shape == (0, 0, 3)
    gray = create_operator("ImageDecoder", pixel_format="Grayscale").forward(garbage)
    assert gray.shape == (0, 0, 1)
    with pytest.raises(Deep500Error, match="pixel_format='CMYK'"):
        create_operator("ImageDecoder", pixel_format="CMYK").forward(garbage)
