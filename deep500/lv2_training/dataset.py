"""The Level-2 dataset interface: a finite, indexable collection of samples.

``dataset[i]`` (an integer) returns one sample as ``{node: array}`` without a batch
axis; ``dataset[indices]`` (an integer array or a slice) returns a minibatch with the
samples stacked along a new leading axis. Nodes are the ONNX graph inputs the arrays
are fed to: ``input_node`` (the data) and ``label_node`` (the labels, if any), so a
minibatch can be passed straight to ``executor.inference_and_backprop``.
"""
from __future__ import annotations

import numpy as np

from deep500.utils.errors import Deep500Error, ShapeError


class Dataset:
    """Base class of datasets.

    Attributes:
        input_node: graph input that receives the samples (default ``"input"``).
        label_node: graph input that receives the labels (``None``: unlabelled).
        classes: number of classes for classification data, else ``None``.
        name: a short name for reports.
    """

    def __init__(self, input_node: str = "input", label_node: str | None = "labels",
                 classes: int | None = None, name: str | None = None):
        self.input_node = input_node
        self.label_node = label_node
        self.classes = classes
        self.name = name or type(self).__name__

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index) -> dict:
        raise NotImplementedError

    @property
    def sample_shape(self) -> tuple:
        """Shape of one sample of ``input_node`` (without the batch axis)."""
        return tuple(np.shape(self[0][self.input_node]))

    @property
    def nodes(self) -> list[str]:
        return [n for n in (self.input_node, self.label_node) if n is not None]

    def labels(self) -> np.ndarray | None:
        """All labels, in index order (``None`` if unlabelled). Subclasses that hold
        them in memory override this; samplers' bias metrics use it."""
        if self.label_node is None:
            return None
        return self[np.arange(len(self))][self.label_node]

    def _check_index(self, index) -> np.ndarray | int:
        """Normalises an index to an int or an int64 array, refusing out-of-range ones."""
        n = len(self)
        if isinstance(index, slice):
            return np.arange(n)[index]
        if np.isscalar(index) or (isinstance(index, np.ndarray) and index.ndim == 0):
            i = int(index)
            if not -n <= i < n:
                raise IndexError(f"{self.name}: index {i} out of range for {n} samples")
            return i % n
        indices = np.asarray(index)
        if indices.dtype.kind not in "iu":
            raise Deep500Error(f"{self.name}: indices must be integers, got {indices.dtype}")
        if not indices.size:
            return indices.astype(np.int64)
        low, high = indices.min(), indices.max()
        if low < -n or high >= n:
            raise IndexError(f"{self.name}: indices outside [0, {n}) requested")
        if low >= 0 and indices.dtype == np.int64:
            return indices   # the samplers' case: no copy
        return indices.astype(np.int64) % n

    def __repr__(self) -> str:
        return (f"{self.name}({len(self)} samples, sample shape {self.sample_shape}, "
                f"classes={self.classes})")


class NumpyDataset(Dataset):
    """Samples (and labels) held in memory as NumPy arrays whose first axis indexes
    samples; a minibatch is one fancy-indexing copy."""

    def __init__(self, data: np.ndarray, labels: np.ndarray | None = None,
                 input_node: str = "input", label_node: str | None = "labels",
                 classes: int | None = None, name: str | None = None):
        data = np.asarray(data)
        if labels is not None:
            labels = np.asarray(labels)
            if len(labels) != len(data):
                raise ShapeError(f"{name or 'NumpyDataset'}: {len(data)} samples but "
                                 f"{len(labels)} labels")
            if classes is None and labels.dtype.kind in "iu" and labels.size:
                classes = int(labels.max()) + 1
        super().__init__(input_node, label_node if labels is not None else None, classes,
                         name)
        self.data = data
        self.label_values = labels

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index) -> dict:
        if type(index) is np.ndarray and index.ndim == 1 and index.dtype.kind in "iu":
            # The samplers' case: NumPy's own bounds check (negative indices wrap, as in
            # _check_index) replaces two reductions over the indices.
            try:
                sample = {self.input_node: self.data[index]}
            except IndexError:
                raise IndexError(f"{self.name}: indices outside [0, {len(self)}) "
                                 f"requested") from None
        else:
            index = self._check_index(index)
            sample = {self.input_node: self.data[index]}
        if self.label_values is not None:
            sample[self.label_node] = self.label_values[index]
        return sample

    @property
    def sample_shape(self) -> tuple:
        return tuple(self.data.shape[1:])

    def labels(self) -> np.ndarray | None:
        return self.label_values

    def split(self, fraction: float, seed: int = 0) -> tuple["NumpyDataset", "NumpyDataset"]:
        """Two disjoint datasets: a seeded random ``fraction`` of the samples, and the
        rest (e.g. a training and a test set)."""
        if not 0 < fraction < 1:
            raise Deep500Error(f"split fraction must be in (0, 1), got {fraction}")
        order = np.random.default_rng(seed).permutation(len(self))
        cut = int(round(fraction * len(self)))
        parts = []
        for part, suffix in ((order[:cut], "a"), (order[cut:], "b")):
            part = np.sort(part)
            parts.append(NumpyDataset(self.data[part],
                                      None if self.label_values is None
                                      else self.label_values[part],
                                      self.input_node, self.label_node or "labels",
                                      self.classes, f"{self.name}[{suffix}]"))
        return parts[0], parts[1]
