import subprocess
import sys

import numpy as np
import pytest

from deep500.datasets.digits import load_digits, stratified_split

sklearn_datasets = pytest.importorskip("sklearn.datasets")


def test_shapes_scaling_and_split_sizes():
    train, test = load_digits()
    assert (len(train), len(test)) == (1437, 360)
    assert train.sample_shape == (1, 8, 8) and train.classes == test.classes == 10
    x = train[np.arange(len(train))]["input"]
    assert x.dtype == np.float32 and x.min() == 0.0 and x.max() == 1.0
    assert train.labels().dtype == np.int64


def test_split_is_stratified_disjoint_and_matches_sklearn():
    bunch = sklearn_datasets.load_digits()
    train_idx, test_idx = stratified_split(bunch.target, 0.2, seed=0)
    assert np.intersect1d(train_idx, test_idx).size == 0
    assert np.union1d(train_idx, test_idx).size == len(bunch.target)
    per_class = np.bincount(bunch.target)
    test_per_class = np.bincount(bunch.target[test_idx], minlength=10)
    assert np.all(np.abs(test_per_class - 0.2 * per_class) <= 1)
    train, test = load_digits(seed=0)
    np.testing.assert_array_equal(train.data * 16, bunch.images[train_idx][:, None])
    np.testing.assert_array_equal(test.labels(), bunch.target[test_idx])


def test_seeded():
    a, _ = load_digits(seed=3)
    b, _ = load_digits(seed=3)
    c, _ = load_digits(seed=4)
    np.testing.assert_array_equal(a.data, b.data)
    assert not np.array_equal(a.labels(), c.labels())


def test_standardize_uses_training_statistics():
    train, test = load_digits(normalize="standardize")
    assert abs(float(train.data.mean())) < 1e-5
    assert abs(float(train.data.std()) - 1) < 1e-5
    unit_train, unit_test = load_digits()
    raw_train = unit_train.data * 16
    np.testing.assert_allclose(test.data, (unit_test.data * 16 - raw_train.mean())
                               / raw_train.std(), rtol=0, atol=1e-5)


def test_options():
    train, test = load_digits(test_fraction=0.5, input_node="x", label_node="y")
    assert (len(train), len(test)) == (898, 899)
    assert set(train[0]) == {"x", "y"}
    with pytest.raises(Exception, match="normalize"):
        load_digits(normalize="max")


def test_read_without_sklearn_equals_sklearn_load_digits(monkeypatch):
    """The bundled CSV read directly gives scikit-learn's arrays exactly, as does the
    fallback through ``sklearn.datasets`` when the file is not where it is expected."""
    from deep500.datasets import digits
    bunch = sklearn_datasets.load_digits()
    for bundled in (digits._bundled_csv(), None):
        assert bundled is None or bundled.name == "digits.csv.gz"
        monkeypatch.setattr(digits, "_bundled_csv", lambda: bundled)
        digits._raw_digits.cache_clear()
        images, labels = digits._raw_digits()
        np.testing.assert_array_equal(images, bunch.images[:, None].astype(np.float32))
        np.testing.assert_array_equal(labels, bunch.target)
        assert images.dtype == np.float32 and labels.dtype == np.int64
    digits._raw_digits.cache_clear()


def test_loading_digits_does_not_import_sklearn():
    code = ("import sys; from deep500.datasets.digits import load_digits; load_digits(); "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
