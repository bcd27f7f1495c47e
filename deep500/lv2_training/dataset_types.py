"""Two dataset types beside NumpyDataset: files loaded lazily, and synthetic data.

``FileListDataset`` keeps only a list of paths (and labels) in memory and loads sample
``i`` with a loader function when it is indexed, so data larger than memory can be
sampled. ``SyntheticDataset`` draws sample ``i`` from a generator seeded with
``(seed, stream, i)``: the same index gives the same sample in every process, epoch and
order, which is what benchmarks of samplers, optimizers and data loading need.
"""
from __future__ import annotations

import os
from typing import Callable, Sequence

import numpy as np

from deep500.lv2_training.dataset import Dataset
from deep500.utils.errors import Deep500Error, ShapeError
from deep500.utils.images import decode_image

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def load_file(path: str) -> np.ndarray:
    """The default loader: ``.npy`` files with ``numpy.load`` (no pickles), images with
    Pillow as float32 C×H×W in [0, 1] (see ``deep500.utils.images``)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise Deep500Error(f"{path}: not a plain .npy array ({exc})") from None
    if suffix in IMAGE_SUFFIXES:
        with open(path, "rb") as handle:
            return decode_image(handle.read(), path)
    raise Deep500Error(f"{path}: no default loader for '{suffix}' files; pass loader= (a "
                       f"function from a path to an array)")


class FileListDataset(Dataset):
    """One file per sample, loaded on access by ``loader(path) -> array``.

    Args:
        files: paths, one per sample.
        labels: one integer label per file (``None``: unlabelled).
        loader: turns a path into the sample's array (default ``load_file``).
    """

    def __init__(self, files: Sequence[str | os.PathLike], labels: Sequence[int] | None = None,
                 loader: Callable[[str], np.ndarray] | None = None, input_node: str = "input",
                 label_node: str | None = "labels", classes: int | None = None,
                 name: str | None = None):
        self.files = [os.fspath(f) for f in files]
        if labels is not None:
            labels = np.asarray(labels, dtype=np.int64)
            if labels.shape != (len(self.files),):
                raise ShapeError(f"{name or 'FileListDataset'}: {len(self.files)} files but "
                                 f"labels of shape {labels.shape}")
            if classes is None and labels.size:
                classes = int(labels.max()) + 1
        super().__init__(input_node, label_node if labels is not None else None, classes, name)
        self.label_values = labels
        self.loader = loader or load_file

    @classmethod
    def from_folders(cls, root: str | os.PathLike, suffixes: Sequence[str] = IMAGE_SUFFIXES,
                     class_names: Sequence[str] | None = None, **options) -> "FileListDataset":
        """Files in class folders ``root/<class>/<file>``; labels are positions in
        ``class_names`` (default: the sorted folder names)."""
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise Deep500Error(f"{root} is not a folder")
        if class_names is None:
            class_names = sorted(d for d in os.listdir(root)
                                 if os.path.isdir(os.path.join(root, d)))
        suffixes = tuple(s.lower() for s in suffixes)
        files, labels = [], []
        for label, folder in enumerate(class_names):
            path = os.path.join(root, folder)
            if not os.path.isdir(path):
                raise Deep500Error(f"{root} has no folder for class {folder!r}")
            for entry in sorted(os.listdir(path)):
                if entry.lower().endswith(suffixes):
                    files.append(os.path.join(path, entry))
                    labels.append(label)
        options.setdefault("classes", len(class_names))
        options.setdefault("name", os.path.basename(os.path.normpath(root)))
        dataset = cls(files, labels, **options)
        dataset.class_names = list(class_names)
        return dataset

    def __len__(self) -> int:
        return len(self.files)

    def load(self, i: int) -> np.ndarray:
        path = self.files[i]
        if not os.path.exists(path):
            raise Deep500Error(f"{self.name}: sample {i}: file {path} does not exist")
        return np.asarray(self.loader(path))

    def __getitem__(self, index) -> dict:
        index = self._check_index(index)
        if isinstance(index, int):
            sample = {self.input_node: self.load(index)}
        else:
            arrays = [self.load(int(i)) for i in index]
            shapes = {a.shape for a in arrays}
            if len(shapes) > 1:
                raise ShapeError(f"{self.name}: files of different shapes {sorted(shapes)} "
                                 f"cannot form one minibatch; make the loader return one size")
            sample = {self.input_node: np.stack(arrays) if arrays else np.empty((0,))}
        if self.label_values is not None:
            sample[self.label_node] = self.label_values[index]
        return sample

    def labels(self) -> np.ndarray | None:
        return self.label_values


class SyntheticDataset(Dataset):
    """Seeded random samples of a fixed shape with uniformly random class labels.

    Sample ``i`` is drawn from ``numpy.random.default_rng([seed, stream, i])``: standard
    normal (``distribution="normal"``) or uniform in [0, 1) (``"uniform"``), cast to
    ``dtype``. Labels are drawn once from ``default_rng([seed, stream])`` (8 bytes per
    sample). Use another ``stream`` for a disjoint test set with the same ``seed``.
    """

    def __init__(self, shape: Sequence[int], classes: int = 10, samples: int = 1024,
                 seed: int = 0, stream: int = 0, distribution: str = "normal",
                 dtype=np.float32, input_node: str = "input", label_node: str | None = "labels",
                 name: str | None = None):
        if distribution not in ("normal", "uniform"):
            raise Deep500Error(f"distribution must be 'normal' or 'uniform', got {distribution!r}")
        if int(samples) < 0 or int(classes) < 1:
            raise Deep500Error(f"SyntheticDataset needs samples >= 0 and classes >= 1, got "
                               f"{samples} and {classes}")
        super().__init__(input_node, label_node, int(classes), name or "synthetic")
        self.shape = tuple(int(s) for s in shape)
        self.samples, self.seed, self.stream = int(samples), int(seed), int(stream)
        self.distribution, self.dtype = distribution, np.dtype(dtype)
        self.label_values = np.random.default_rng([self.seed, self.stream]).integers(
            0, self.classes, self.samples, dtype=np.int64)

    def __len__(self) -> int:
        return self.samples

    def sample(self, i: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.stream, i])
        values = (rng.standard_normal(self.shape, dtype=np.float32)
                  if self.distribution == "normal" else rng.random(self.shape, dtype=np.float32))
        return values.astype(self.dtype, copy=False)

    def __getitem__(self, index) -> dict:
        index = self._check_index(index)
        if isinstance(index, int):
            data = self.sample(index)
        else:
            data = np.empty((len(index),) + self.shape, self.dtype)
            for row, i in enumerate(index):
                data[row] = self.sample(int(i))
        sample = {self.input_node: data}
        if self.label_node is not None:
            sample[self.label_node] = self.label_values[index]
        return sample

    @property
    def sample_shape(self) -> tuple:
        return self.shape

    def labels(self) -> np.ndarray | None:
        return self.label_values if self.label_node is not None else None
