"""Datasets by name: ``d5.load_dataset(name, ...)`` and ``d5.dataset_shape(name)``.

=============== ============== ======= ================ ===============================
name            input          classes train / test     source
=============== ============== ======= ================ ===============================
digits          1×8×8          10      1,437 / 360      scikit-learn (bundled)
mnist           1×28×28        10      60,000 / 10,000  IDX files, downloaded
fashion-mnist   1×28×28        10      60,000 / 10,000  IDX files, downloaded
cifar10         3×32×32        10      50,000 / 10,000  binary version, downloaded
cifar100        3×32×32        100     50,000 / 10,000  binary version, downloaded
synthetic       3×32×32 (any)  10      1,024 / 256      seeded random (``shape=`` etc.)
token-order     16 int64 ids   2       4,096 / 1,024    generated (``sequences``)
markov-tokens   16 int64 ids   8/token 4,096 / 1,024    generated (``sequences``)
=============== ============== ======= ================ ===============================

Names are matched ignoring case, ``-`` and ``_`` (``"CIFAR-10"`` is ``cifar10``).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from deep500.datasets import cifar, digits, idx, sequences
from deep500.lv2_training.dataset_types import SyntheticDataset
from deep500.utils.errors import Deep500Error


@dataclasses.dataclass(frozen=True)
class DatasetEntry:
    """A named dataset: ``load(**options) -> (train, test)`` and ``shape(**options)``
    (its shape without loading anything). Datasets that read no files (``files=False``)
    ignore the file options, so a caller can pass ``root=`` etc. to any dataset."""

    name: str
    load: Callable
    shape: Callable
    description: str
    files: bool = True


def _fixed_shape(input_shape, classes, train, test):
    def shape(**_options):
        return {"input": tuple(input_shape), "classes": classes, "train_samples": train,
                "test_samples": test, "dtype": "float32", "label_dtype": "int64"}
    return shape


def _digits_shape(test_fraction: float = 0.2, **_options):
    test = digits.held_out_count(digits.SAMPLES, test_fraction)
    return _fixed_shape(digits.IMAGE_SHAPE, digits.CLASSES, digits.SAMPLES - test, test)()


def _cifar100_shape(label: str = "fine", **_options):
    if label not in cifar.CIFAR100.classes:
        raise Deep500Error(f"cifar100 has labels {sorted(cifar.CIFAR100.classes)}, not {label!r}")
    return _fixed_shape(cifar.IMAGE_SHAPE, cifar.CIFAR100.classes[label], 50000, 10000)()


SYNTHETIC_DEFAULTS = {"shape": (3, 32, 32), "classes": 10, "train_samples": 1024,
                      "test_samples": 256}


def _synthetic_shape(**options):
    settings = {**SYNTHETIC_DEFAULTS, **options}
    return {"input": tuple(settings["shape"]), "classes": int(settings["classes"]),
            "train_samples": int(settings["train_samples"]),
            "test_samples": int(settings["test_samples"]),
            "dtype": str(settings.get("dtype", "float32")), "label_dtype": "int64"}


def load_synthetic(shape=SYNTHETIC_DEFAULTS["shape"], classes: int = 10,
                   train_samples: int = 1024, test_samples: int = 256, seed: int = 0,
                   input_node: str = "input", label_node: str = "labels", **options):
    """Seeded random ``(train, test)`` SyntheticDatasets (streams 0 and 1 of ``seed``)."""
    return tuple(SyntheticDataset(shape, classes, samples, seed, stream, input_node=input_node,
                                  label_node=label_node, name=f"synthetic-{split}", **options)
                 for stream, (samples, split) in enumerate(((train_samples, "train"),
                                                            (test_samples, "test"))))


DATASETS: dict[str, DatasetEntry] = {}


def canonical_name(name: str) -> str:
    return str(name).lower().replace("-", "").replace("_", "")


FILE_OPTIONS = ("root", "download", "path", "verify", "progress", "mirrors")


def register_dataset(name: str, load: Callable, shape: Callable, description: str = "",
                     files: bool = True) -> None:
    """Adds a dataset under ``name`` (replacing one of the same canonical name)."""
    DATASETS[canonical_name(name)] = DatasetEntry(name, load, shape, description, files)


def dataset_names() -> list[str]:
    return [entry.name for entry in DATASETS.values()]


def _entry(name: str) -> DatasetEntry:
    try:
        return DATASETS[canonical_name(name)]
    except KeyError:
        raise Deep500Error(f"Unknown dataset {name!r}; known datasets: "
                           f"{', '.join(dataset_names())}") from None


def load_dataset(name: str, **options):
    """``(train, test)`` datasets by name. Common options: ``input_node``,
    ``label_node``; downloaded datasets also take ``root`` (cache folder), ``download``,
    ``path`` (the user's own files), ``verify``, ``progress``, ``mirrors``; see each
    loader (``load_digits``, ``load_mnist``, ``load_cifar``, ``load_synthetic``)."""
    entry = _entry(name)
    if not entry.files:
        options = {k: v for k, v in options.items() if k not in FILE_OPTIONS}
    try:
        return entry.load(**options)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise Deep500Error(f"load_dataset({entry.name!r}): {exc}") from None
        raise


def dataset_shape(name: str, **options) -> dict:
    """``{"input": sample shape, "classes", "train_samples", "test_samples", "dtype",
    "label_dtype"}`` of a named dataset, without loading it."""
    return _entry(name).shape(**options)


register_dataset("digits", digits.load_digits, _digits_shape,
                 "scikit-learn's bundled 8×8 handwritten digits", files=False)
for _spec, _load, _description in ((idx.MNIST, idx.load_mnist, "MNIST handwritten digits"),
                                   (idx.FASHION_MNIST, idx.load_fashion_mnist,
                                    "Fashion-MNIST article images")):
    register_dataset(_spec.name, _load, _fixed_shape(_spec.image_shape, _spec.classes,
                                                     _spec.train_samples, _spec.test_samples),
                     _description)
register_dataset("cifar10", cifar.load_cifar10,
                 _fixed_shape(cifar.IMAGE_SHAPE, cifar.CIFAR10.classes["fine"], 50000, 10000),
                 "CIFAR-10")
register_dataset("cifar100", cifar.load_cifar100, _cifar100_shape, "CIFAR-100")
register_dataset("synthetic", load_synthetic, _synthetic_shape,
                 "seeded random data of any shape", files=False)
register_dataset("token-order", sequences.load_token_order, sequences.token_order_shape,
                 "generated token sequences: does token A come before token B", files=False)
register_dataset("markov-tokens", sequences.load_markov_tokens, sequences.markov_tokens_shape,
                 "generated next-token prediction on a seeded order-2 Markov chain",
                 files=False)
