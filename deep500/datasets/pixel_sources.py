"""8-bit images that a storage format can hold, by name, generated or shipped (nothing
is downloaded): the pixels the dataset latency study (``experiment: datasets``) writes
into each storage, so every storage serves the same images.

============= ============ ======= ======= ==========================================
name          image        classes images  source
============= ============ ======= ======= ==========================================
digits        1×8×8        10      1,797   scikit-learn's bundled digits, 0..16 → 0..255
cifar-shaped  3×32×32      10      2,048   seeded, generated (CIFAR-10's shape and size
                                           per image; not its content)
============= ============ ======= ======= ==========================================

The CIFAR-shaped images are smooth colour fields (a random 8×8 grid per channel,
bilinearly upsampled) with mild noise, so that their JPEGs have the size of natural
32×32 photographs (about 1-2 KB at quality 90) rather than of white noise.
"""
from __future__ import annotations

import numpy as np

from deep500.datasets import digits
from deep500.utils.errors import Deep500Error

CIFAR_SHAPED_IMAGES = 2048


def digits_pixels(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits as uint8 N×1×8×8 (``round(value × 255 / 16)``) and int64
    labels (``seed`` is unused: the digits are fixed)."""
    images, labels = digits._raw_digits()
    return (np.rint(images * (255 / 16)).astype(np.uint8), np.array(labels, np.int64))


def _upsample(grid: np.ndarray, factor: int) -> np.ndarray:
    """Bilinear upsampling of the last two axes by ``factor`` (pixel centres aligned)."""
    size = grid.shape[-1]
    positions = np.clip((np.arange(size * factor) + 0.5) / factor - 0.5, 0, size - 1)
    low = np.floor(positions).astype(int)
    high = np.minimum(low + 1, size - 1)
    weight = (positions - low).astype(np.float32)
    rows = grid[..., low, :] * (1 - weight)[:, None] + grid[..., high, :] * weight[:, None]
    return rows[..., low] * (1 - weight) + rows[..., high] * weight


def cifar_shaped_pixels(seed: int = 0, images: int = CIFAR_SHAPED_IMAGES
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``images`` seeded uint8 3×32×32 images (see the module) and int64 labels in
    [0, 10)."""
    rng = np.random.default_rng([seed, 32])
    grids = rng.uniform(0, 255, (images, 3, 8, 8)).astype(np.float32)
    pixels = _upsample(grids, 4) + rng.normal(0, 6, (images, 3, 32, 32)).astype(np.float32)
    labels = rng.integers(0, 10, images, dtype=np.int64)
    # the fancy indexing of the upsampling leaves a strided layout: gathering a
    # minibatch from it would cost 1,000 times more than from rows in order
    return np.ascontiguousarray(np.clip(np.rint(pixels), 0, 255), np.uint8), labels


PIXEL_SOURCES = {"digits": digits_pixels, "cifar-shaped": cifar_shaped_pixels}
#: images per source, known without generating them
IMAGE_COUNTS = {"digits": digits.SAMPLES, "cifar-shaped": CIFAR_SHAPED_IMAGES}


def pixel_source(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 N×C×H×W images, int64 labels) of the source called ``name``."""
    if name not in PIXEL_SOURCES:
        raise Deep500Error(f"unknown image source {name!r}; known: {sorted(PIXEL_SOURCES)}")
    return PIXEL_SOURCES[name](seed)
