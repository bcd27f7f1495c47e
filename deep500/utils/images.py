"""Decoding image files (JPEG, PNG, ...) into float32 C×H×W arrays with Pillow.

Pixels are scaled to [0, 1] (``value / 255``). With ``size=(height, width)`` every image
comes out the same size so that minibatches stack: ``crop=True`` scales the shorter side
to fit and cuts the centre (the usual ImageNet evaluation preprocessing, Krizhevsky et
al. 2012), ``crop=False`` stretches the whole image to the size.
"""
from __future__ import annotations

import io

import numpy as np

from deep500.utils.errors import Deep500Error, ShapeError, require

MODES = {3: "RGB", 1: "L"}


def decode_image(data: bytes, source: str, size: tuple[int, int] | None = None,
                 crop: bool = True, channels: int = 3) -> np.ndarray:
    """float32 ``channels``×H×W in [0, 1] from the bytes of one image file;
    ``source`` names it in errors."""
    image_module = require("PIL.Image", "datasets", "Decoding JPEG images")
    if channels not in MODES:
        raise Deep500Error(f"channels must be 1 or 3, got {channels}")
    try:
        with image_module.open(io.BytesIO(data)) as image:
            image = image.convert(MODES[channels])
            if size is not None:
                image = _resize(image, size, crop, image_module)
            pixels = np.asarray(image, dtype=np.float32)
    except image_module.DecompressionBombError as exc:
        raise Deep500Error(
            f"{source}: the image is too large to decode ({exc}); the limit is "
            f"{2 * image_module.MAX_IMAGE_PIXELS:,} pixels. Resize the image, or raise "
            f"PIL.Image.MAX_IMAGE_PIXELS if you trust the file.") from None
    except (OSError, SyntaxError, ValueError) as exc:  # PIL's UnidentifiedImageError is an OSError
        raise Deep500Error(f"{source}: cannot decode the image ({exc}); the file is corrupt "
                           f"or not an image") from None
    pixels /= np.float32(255)
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)


def _resize(image, size: tuple[int, int], crop: bool, image_module):
    height, width = (int(s) for s in size)
    if not crop:
        return image.resize((width, height), image_module.BILINEAR)
    scale = max(height / image.height, width / image.width)
    scaled = (max(width, round(image.width * scale)), max(height, round(image.height * scale)))
    image = image.resize(scaled, image_module.BILINEAR)
    left, top = (scaled[0] - width) // 2, (scaled[1] - height) // 2
    return image.crop((left, top, left + width, top + height))


def stack_samples(samples: list[np.ndarray], what: str) -> np.ndarray:
    """One minibatch from samples of equal shape; a ShapeError says to fix a size."""
    shapes = {s.shape for s in samples}
    if len(shapes) > 1:
        raise ShapeError(f"{what}: samples of different shapes {sorted(shapes)} cannot form "
                         f"one minibatch; give the dataset a fixed image_size")
    return np.stack(samples) if samples else np.empty((0,), np.float32)
