"""Writers of 8-bit images in the storage formats the loaders read: an IDX file (the
MNIST format, LeCun et al.) and an uncompressed tar of JPEGs in class folders (the
ImageNet layout ``IndexedTarDataset`` reads). The dataset latency study
(``experiment: datasets``) stores one set of pixels in each, inside its run folder.
"""
from __future__ import annotations

import io
import os
import tarfile

import numpy as np

from deep500.utils.errors import Deep500Error, require

# IDX type codes (deep500.datasets.idx.IDX_TYPES, inverted)
IDX_CODES = {np.dtype("uint8"): 0x08, np.dtype("int8"): 0x09, np.dtype(">i2"): 0x0B,
             np.dtype(">i4"): 0x0C, np.dtype(">f4"): 0x0D, np.dtype(">f8"): 0x0E}


def idx_bytes(array: np.ndarray) -> bytes:
    """The IDX encoding of ``array``: 00 00 <type> <ndim>, the dimensions as big-endian
    uint32, then the values big-endian in row-major order."""
    array = np.asarray(array)
    big_endian = array.dtype.newbyteorder(">") if array.dtype.itemsize > 1 else array.dtype
    if big_endian not in IDX_CODES or array.ndim > 255:
        raise Deep500Error(f"IDX stores uint8, int8, int16, int32, float32 or float64 "
                           f"arrays of at most 255 dimensions, not {array.dtype} of "
                           f"{array.ndim} dimensions")
    header = bytes([0, 0, IDX_CODES[big_endian], array.ndim])
    header += np.array(array.shape, ">u4").tobytes()
    return header + np.ascontiguousarray(array, big_endian).tobytes()


def _replace_with(path: str, write) -> str:
    """``write(handle)`` into a file beside ``path`` that then replaces it, so that a
    reader never sees half a file."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as handle:
            write(handle)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return os.fspath(path)


def write_idx(path: str, array: np.ndarray) -> str:
    """``array`` as an uncompressed IDX file at ``path``."""
    return _replace_with(path, lambda handle: handle.write(idx_bytes(array)))


def jpeg_bytes(image: np.ndarray, quality: int = 90) -> bytes:
    """One uint8 C×H×W image (C = 1 or 3) as a baseline JFIF JPEG, by Pillow."""
    pil = require("PIL.Image", "datasets", "Writing JPEG images")
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[0] not in (1, 3):
        raise Deep500Error(f"a JPEG is written from uint8 C×H×W pixels with 1 or 3 "
                           f"channels, got {image.dtype} of shape {image.shape}")
    pixels = image[0] if image.shape[0] == 1 else image.transpose(1, 2, 0)
    buffer = io.BytesIO()
    pil.fromarray(np.ascontiguousarray(pixels)).save(buffer, "JPEG", quality=int(quality))
    return buffer.getvalue()


def write_jpeg_tar(path: str, images: np.ndarray, labels: np.ndarray,
                   quality: int = 90) -> str:
    """An uncompressed tar at ``path`` holding image ``i`` as
    ``<label>/<i, 6 digits>.jpg`` (so folders sort by label and members by index)."""
    images, labels = np.asarray(images), np.asarray(labels)
    if len(images) != len(labels):
        raise Deep500Error(f"write_jpeg_tar: {len(images)} images but {len(labels)} labels")
    width = max(1, len(str(int(labels.max())))) if labels.size else 1

    def write(handle):
        with tarfile.open(fileobj=handle, mode="w") as tar:
            for i, (image, label) in enumerate(zip(images, labels)):
                data = jpeg_bytes(image, quality)
                info = tarfile.TarInfo(f"{int(label):0{width}d}/{i:06d}.jpg")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return _replace_with(path, write)
