"""The embedded default dataset: scikit-learn's bundled handwritten digits.

1,797 8×8 images of the digits 0-9 (the UCI "Optical Recognition of Handwritten Digits"
test set, Alpaydin & Kaynak 1998), shipped inside scikit-learn, so nothing is downloaded.
Each pixel counts the set bits of a 4×4 block of a 32×32 bitmap, an integer in 0..16.

Samples are float32 N×1×8×8 and labels int64 in [0, 10). ``normalize="unit"`` (default)
divides by 16 into [0, 1]; ``"standardize"`` subtracts the training split's mean pixel
value and divides by its standard deviation (one scalar each, so both splits are scaled
alike and the test set does not leak into it). The train/test split is stratified and a
pure function of ``seed``: by default 1,437 training and 360 test images.
"""
from __future__ import annotations

import functools
import gzip
import importlib.util
import math
from pathlib import Path

import numpy as np

from deep500.lv2_training.dataset import NumpyDataset
from deep500.utils.errors import Deep500Error, require

CLASSES = 10
IMAGE_SHAPE = (1, 8, 8)
SAMPLES = 1797
NORMALIZATIONS = ("unit", "standardize")


def held_out_count(samples: int, test_fraction: float) -> int:
    """Test samples for a fraction, rounded up (so 0.2 of 1,797 gives 360)."""
    return min(samples - 1, max(1, math.ceil(test_fraction * samples - 1e-9)))


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int = 0):
    """(train indices, test indices), both sorted, with every class represented in the
    test set in proportion to its size (within one sample), chosen by ``seed``.

    Each sample gets the key ``(rank within its class + ½) / class size`` under a seeded
    permutation of the class; the ``held_out_count`` smallest keys form the test set, so each
    class contributes its first ranks in turn.
    """
    if not 0 < test_fraction < 1:
        raise Deep500Error(f"test_fraction must be in (0, 1), got {test_fraction}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    keys = np.empty(len(labels))
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        keys[members[rng.permutation(len(members))]] = \
            (np.arange(len(members)) + 0.5) / len(members)
    order = np.lexsort((rng.random(len(labels)), keys))  # random tie-break between classes
    cut = held_out_count(len(labels), test_fraction)
    return np.sort(order[cut:]), np.sort(order[:cut])


def _bundled_csv() -> Path | None:
    """scikit-learn's ``datasets/data/digits.csv.gz``, found without importing
    scikit-learn; None when it is not installed or keeps the file elsewhere."""
    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder, "datasets", "data", "digits.csv.gz")
        if path.is_file():
            return path
    return None


def _digits_table() -> np.ndarray:
    """The 1,797 × 65 table (64 pixels, then the label) that ``load_digits`` reads."""
    path = _bundled_csv()
    if path is None:
        datasets = require("sklearn.datasets", "datasets", "The embedded digits dataset")
        bunch = datasets.load_digits()
        return np.column_stack([bunch.data, bunch.target])
    # Read as sklearn.datasets.load_digits reads it: importing sklearn.datasets costs a
    # process 2-3 s of CPU (scipy, pandas), paid again by every MPI rank of the tests.
    with gzip.open(path, mode="rt", encoding="utf-8") as text:
        return np.loadtxt(text, delimiter=",")


@functools.lru_cache(maxsize=1)
def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    table = _digits_table()
    images = table[:, :-1].astype(np.float32).reshape((-1,) + IMAGE_SHAPE)
    labels = table[:, -1].astype(np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def load_digits(test_fraction: float = 0.2, seed: int = 0, normalize: str = "unit",
                input_node: str = "input", label_node: str = "labels"):
    """``(train, test)`` NumpyDatasets of the scikit-learn digits (see the module)."""
    if normalize not in NORMALIZATIONS:
        raise Deep500Error(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    images, labels = _raw_digits()
    train, test = stratified_split(labels, test_fraction, seed)
    if normalize == "unit":
        scaled = images / np.float32(16)
    else:
        mean, std = images[train].mean(), images[train].std()
        scaled = (images - np.float32(mean)) / np.float32(std)
    return tuple(NumpyDataset(scaled[part], labels[part], input_node, label_node, CLASSES,
                              f"digits-{split}")
                 for part, split in ((train, "train"), (test, "test")))
