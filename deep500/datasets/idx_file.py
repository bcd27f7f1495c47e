"""Images read from an IDX file on every access, not loaded into memory first.

``load_mnist`` reads a whole IDX file into memory once; this dataset instead keeps the
file open and reads the samples of each minibatch from it (``os.pread`` at
``header + i × sample bytes``), as a loader of a dataset larger than memory must. The
IDX layout (LeCun, Cortes & Burges; see :mod:`deep500.datasets.idx`) stores sample
``i`` at a fixed offset, so a run of consecutive indices is one read: a minibatch in
file order costs one system call, a shuffled one a call per sample. The labels are
small and read whole.
"""
from __future__ import annotations

import math
import os

import numpy as np

from deep500.datasets.idx import IDX_TYPES, read_idx
from deep500.datasets.read_descriptor import SharedReadDescriptor
from deep500.lv2_training.dataset import Dataset
from deep500.utils.errors import Deep500Error


def idx_layout(path: str) -> tuple[np.dtype, tuple[int, ...], int]:
    """(big-endian dtype, shape, byte offset of the values) from the header of the
    uncompressed IDX file at ``path``; a Deep500Error where the file does not hold
    exactly what its header promises."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
            if len(head) < 4 or head[:2] != b"\0\0" or head[2] not in IDX_TYPES:
                raise Deep500Error(f"{path}: not an uncompressed IDX file (magic number "
                                   f"0x{head.hex() or 'nothing'}); decompress a .gz first")
            dimensions = handle.read(4 * head[3])
    except OSError as exc:
        raise Deep500Error(f"{path}: cannot be read ({exc.strerror})") from None
    if len(dimensions) < 4 * head[3]:
        raise Deep500Error(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(dimensions[4 * i:4 * i + 4], "big") for i in range(head[3]))
    dtype, offset = np.dtype(IDX_TYPES[head[2]]), 4 + 4 * head[3]
    expected = offset + math.prod(shape) * dtype.itemsize
    if os.path.getsize(path) != expected:
        raise Deep500Error(f"{path}: the IDX header promises shape {shape} of {dtype.name} "
                           f"({expected} bytes) but the file has {os.path.getsize(path)}")
    return dtype, shape, offset


class IdxFileDataset(SharedReadDescriptor, Dataset):
    """uint8 images N×H×W (one channel) or N×C×H×W in an IDX file, with labels in
    another; samples come out as float32 C×H×W ``pixel / 255`` in [0, 1], labels as
    int64, as ``load_mnist`` gives them.

    Args:
        images: path of the uncompressed IDX file of the images (type uint8).
        labels: path of the IDX file of the labels (one per image), or ``None``.
    """

    def __init__(self, images: str, labels: str | None = None, input_node: str = "input",
                 label_node: str | None = "labels", classes: int | None = None,
                 name: str | None = None):
        images = os.path.abspath(os.fspath(images))
        dtype, shape, self.offset = idx_layout(images)
        if dtype != np.uint8 or len(shape) not in (3, 4):
            raise Deep500Error(f"{images}: IdxFileDataset reads uint8 N×H×W or N×C×H×W "
                               f"images, the file holds {dtype.name} of shape {shape}")
        self.images = images
        self.count = shape[0]
        self.image_shape = shape[1:] if len(shape) == 4 else (1,) + shape[1:]
        self.sample_bytes = math.prod(self.image_shape)
        self.label_values = None
        if labels is not None:
            self.label_values = read_idx(os.fspath(labels)).astype(np.int64).ravel()
            if len(self.label_values) != self.count:
                raise Deep500Error(f"{labels}: {len(self.label_values)} labels for the "
                                   f"{self.count} images of {images}")
            if classes is None and self.count:
                classes = int(self.label_values.max()) + 1
        super().__init__(input_node, label_node if labels is not None else None, classes,
                         name or os.path.basename(images))
        self._init_descriptor()

    def __len__(self) -> int:
        return self.count

    @property
    def sample_shape(self) -> tuple:
        return tuple(self.image_shape)

    def labels(self) -> np.ndarray | None:
        return self.label_values

    def __getitem__(self, index) -> dict:
        index = self._check_index(index)
        indices = np.atleast_1d(index)
        pixels = np.empty((len(indices), self.sample_bytes), np.uint8)
        # runs of consecutive indices: each run is one read
        bounds = [0, *(np.flatnonzero(np.diff(indices) != 1) + 1).tolist(), len(indices)]
        for start, stop in zip(bounds[:-1], bounds[1:]):
            if stop > start:
                pixels[start:stop] = self._read(int(indices[start]), stop - start)
        samples = pixels.reshape((len(indices),) + self.image_shape).astype(np.float32)
        samples /= np.float32(255)
        sample = {self.input_node: samples[0] if np.ndim(index) == 0 else samples}
        if self.label_node is not None:
            sample[self.label_node] = self.label_values[index]
        return sample

    def _read(self, first: int, count: int) -> np.ndarray:
        size = count * self.sample_bytes
        data = os.pread(self._descriptor(), size, self.offset + first * self.sample_bytes)
        if len(data) != size:
            raise Deep500Error(f"{self.images}: samples {first}..{first + count - 1} are "
                               f"truncated ({len(data)} of {size} bytes); the file changed")
        return np.frombuffer(data, np.uint8).reshape(count, self.sample_bytes)

    def _descriptor_path(self) -> str:
        return self.images
