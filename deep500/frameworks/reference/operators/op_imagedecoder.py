"""ImageDecoder: the image an encoded byte stream (uint8, 1-D) holds, as uint8 pixels
[height, width, channels] in ``pixel_format`` RGB (3 channels, the default), BGR, or
Grayscale (1 channel). https://onnx.ai/onnx/operators/onnx__ImageDecoder.html

Pillow decodes it: BMP, JPEG, JPEG 2000, TIFF, PNG, WebP and the portable formats
(PBM, PGM, PPM, PNM), the formats the specification lists (JPEG 2000 and WebP where
Pillow was built with OpenJPEG and libwebp). Pillow decodes JPEG with libjpeg(-turbo),
whose default chroma upsampling is the "fancy" one the specification names. A stream
that cannot be decoded gives an empty [0, 0, channels] image, as the specification asks.
"""
import io

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, require

_MODES = {"RGB": "RGB", "BGR": "RGB", "Grayscale": "L"}


@register("ImageDecoder")
class ImageDecoder(ReferenceOp):
    defaults = {"pixel_format": "RGB"}

    def forward(self, encoded_stream):
        pixel_format = self.attr("pixel_format")
        if pixel_format not in _MODES:
            raise Deep500Error(f"{self.op_type}: pixel_format={pixel_format!r} is not one of "
                               f"{sorted(_MODES)}")
        image_module = require("PIL.Image", "datasets", "The reference ImageDecoder")
        channels = 1 if pixel_format == "Grayscale" else 3
        try:
            with image_module.open(io.BytesIO(np.asarray(encoded_stream).tobytes())) as image:
                pixels = np.asarray(image.convert(_MODES[pixel_format]), dtype=np.uint8)
        except (OSError, ValueError, SyntaxError):   # what Pillow raises on a bad stream
            return np.zeros((0, 0, channels), np.uint8)
        pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], channels)
        return np.ascontiguousarray(pixels[..., ::-1]) if pixel_format == "BGR" else pixels

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]   # bytes in, pixels out: nothing to differentiate
