"""TensorFlowVisitor: the image family (``deep500/frameworks/families.py``):
https://onnx.ai/onnx/operators/onnx__ImageDecoder.html — the image an encoded byte stream
(uint8, 1-D) holds, as uint8 pixels [height, width, channels] in ``pixel_format`` RGB
(the default), BGR or Grayscale, decoded by TensorFlow (BMP, GIF, PNG, WebP; JPEG with
libjpeg's accurate integer IDCT and "fancy" chroma upsampling, as Pillow, which ONNX's
reference uses, decodes it). Grayscale is ITU-R 601-2 luma of the RGB image in Pillow's
fixed point, (19595 R + 38470 G + 7471 B + 2^15) >> 16. JPEG 2000, TIFF and the portable
formats, which the specification lists but TensorFlow cannot decode, are refused
(UnsupportedError) where the stream is known when the closure runs; another stream that
cannot be decoded gives the empty [0, 0, channels] image the specification asks for, in
eager mode (a traced function raises TensorFlow's error).
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _text
from deep500.frameworks.tensorflow.ops._values import _known_value
from deep500.utils.errors import Deep500Error, UnsupportedError

_CHANNELS = {"RGB": 3, "BGR": 3, "Grayscale": 1}
# Leading bytes of the formats ONNX lists that TensorFlow has no decoder for.
_UNDECODABLE = {b"\x00\x00\x00\x0cjP  ": "JPEG 2000", b"\xffO\xffQ": "JPEG 2000",
                b"II*\x00": "TIFF", b"MM\x00*": "TIFF",
                **{f"P{k}".encode(): "portable (PNM)" for k in range(1, 8)}}
# Each byte value as a one-byte string: gathering and joining them turns a uint8 tensor
# into the string tensor TensorFlow's decoders read, inside TensorFlow.
_BYTES = np.array([bytes([value]) for value in range(256)], dtype=object)


class ImageOps:
    """``visit_<op>`` of the image family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_imagedecoder(self, op, network) -> None:
        """ImageDecoder (see the module docstring)."""
        pixel_format = _text(op.attributes.get("pixel_format"), "RGB")
        if pixel_format not in _CHANNELS:
            raise self.node_error(op, f"pixel_format={pixel_format!r} is not one of "
                                      f"{sorted(_CHANNELS)}", Deep500Error)
        channels = _CHANNELS[pixel_format]

        def image_decoder(stream):
            self._refuse_undecodable(op, stream)
            encoded = tf.strings.reduce_join(tf.gather(tf.constant(_BYTES, tf.string),
                                                       tf.cast(stream, tf.int32)))
            try:
                rgb = tf.cond(tf.io.is_jpeg(encoded),
                              lambda: tf.io.decode_jpeg(encoded, channels=3,
                                                        dct_method="INTEGER_ACCURATE"),
                              lambda: tf.io.decode_image(encoded, channels=3,
                                                         dtype=tf.uint8,
                                                         expand_animations=False))
            except tf.errors.InvalidArgumentError:
                return tf.zeros([0, 0, channels], tf.uint8)
            if pixel_format == "Grayscale":
                weighted = tf.cast(rgb, tf.int32) * tf.constant([19595, 38470, 7471])
                luma = tf.bitwise.right_shift(tf.reduce_sum(weighted, -1) + (1 << 15), 16)
                return tf.cast(luma, tf.uint8)[..., tf.newaxis]
            return rgb[..., ::-1] if pixel_format == "BGR" else rgb
        self._emit_node(op, image_decoder)

    def _refuse_undecodable(self, op, stream) -> None:
        known = _known_value(stream)
        if known is None:
            return
        head = np.asarray(known, np.uint8)[:12].tobytes()
        for magic, name in _UNDECODABLE.items():
            if head.startswith(magic):
                raise self.node_error(op, f"the stream is a {name} image, which TensorFlow "
                                          f"cannot decode; run the model on the reference "
                                          f"executor", UnsupportedError)
