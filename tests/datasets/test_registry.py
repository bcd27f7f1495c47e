import numpy as np
import pytest

from deep500.datasets import (dataset_names, dataset_shape, load_dataset, register_dataset)
from deep500.datasets.registry import DATASETS
from deep500.lv2_training.dataset import NumpyDataset
from deep500.utils.errors import Deep500Error

EXPECTED = {
    "digits": ((1, 8, 8), 10, 1437, 360),
    "mnist": ((1, 28, 28), 10, 60000, 10000),
    "fashion-mnist": ((1, 28, 28), 10, 60000, 10000),
    "cifar10": ((3, 32, 32), 10, 50000, 10000),
    "cifar100": ((3, 32, 32), 100, 50000, 10000),
    "synthetic": ((3, 32, 32), 10, 1024, 256),
}


# Generated token sequences (deep500/datasets/sequences.py): int64 tokens.
SEQUENCES = {
    "token-order": ((16,), 2, 4096, 1024),
    "markov-tokens": ((16,), 8, 4096, 1024),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dataset_shape(name):
    shape = dataset_shape(name)
    assert (shape["input"], shape["classes"], shape["train_samples"],
            shape["test_samples"]) == EXPECTED[name]
    assert shape["dtype"] == "float32" and shape["label_dtype"] == "int64"


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_sequence_dataset_shape(name):
    shape = dataset_shape(name)
    assert (shape["input"], shape["classes"], shape["train_samples"],
            shape["test_samples"]) == SEQUENCES[name]
    assert shape["dtype"] == "int64" and shape["label_dtype"] == "int64"


def test_names_and_aliases():
    assert dataset_names() == list(EXPECTED) + list(SEQUENCES)
    assert dataset_shape("CIFAR-10")["classes"] == 10
    assert dataset_shape("Fashion_MNIST")["input"] == (1, 28, 28)
    assert dataset_shape("cifar100", label="coarse")["classes"] == 20
    assert dataset_shape("synthetic", shape=(5,), classes=3)["input"] == (5,)
    with pytest.raises(Deep500Error) as error:
        dataset_shape("imagenet-1k")
    assert "imagenet-1k" in str(error.value)
    assert all(name in str(error.value) for name in EXPECTED)
    with pytest.raises(Deep500Error, match="known datasets"):
        load_dataset("nope")


@pytest.mark.parametrize("name, options", [("digits", {}),
                                           ("synthetic", {"shape": (2, 5), "classes": 3})])
def test_shape_agrees_with_loaded_data(name, options):
    train, test = load_dataset(name, input_node="data", label_node="target", **options)
    shape = dataset_shape(name, **options)
    assert (len(train), len(test)) == (shape["train_samples"], shape["test_samples"])
    batch = train[np.arange(4)]
    assert batch["data"].shape[1:] == shape["input"] and batch["data"].dtype == np.float32
    assert batch["target"].dtype == np.int64 and train.classes == shape["classes"]


def test_synthetic_train_and_test_differ():
    train, test = load_dataset("synthetic", shape=(4,), seed=1)
    assert not np.array_equal(train[0]["input"], test[0]["input"])


def test_unknown_option_and_ignored_file_options(tmp_path):
    with pytest.raises(Deep500Error, match="load_dataset\\('digits'\\).*colour"):
        load_dataset("digits", colour=True)
    train, _ = load_dataset("digits", root=tmp_path, download=False, progress=False)
    assert len(train) == 1437


def test_register_dataset(monkeypatch):
    monkeypatch.setattr("deep500.datasets.registry.DATASETS", dict(DATASETS))

    def load(**options):
        data = NumpyDataset(np.zeros((4, 2), np.float32), np.arange(4) % 2)
        return data, data

    register_dataset("Tiny", load, lambda **o: {"input": (2,), "classes": 2})
    assert load_dataset("tiny")[0].classes == 2
    assert "Tiny" in dataset_names()
