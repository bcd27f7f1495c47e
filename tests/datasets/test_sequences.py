"""The generated sequence datasets: shapes and dtypes, determinism by seed, the
token-order task's definition and balance (and that token counts alone cannot solve it),
and the Markov chain's statistics and Bayes accuracy."""
import numpy as np
import pytest

from deep500.datasets import dataset_shape, load_dataset
from deep500.datasets.sequences import (PAD, TOKEN_A, TOKEN_B, bayes_accuracy,
                                        load_markov_tokens, load_token_order, markov_chain,
                                        markov_split)
from deep500.utils.errors import Deep500Error


@pytest.mark.parametrize("name", ["token-order", "markov-tokens"])
def test_registered_shapes_match_the_data(name):
    shape = dataset_shape(name, sequence_length=12, vocab=9, train_samples=100,
                          test_samples=30)
    train, test = load_dataset(name, sequence_length=12, vocab=9, train_samples=100,
                               test_samples=30, root="/ignored")   # file options ignored
    assert (len(train), len(test)) == (shape["train_samples"], shape["test_samples"])
    assert train.sample_shape == shape["input"] == (12,)
    assert train.classes == shape["classes"] and train.vocab == shape["vocab"] == 9
    batch = train[np.arange(5)]
    assert batch["input"].dtype == np.int64 == batch["labels"].dtype
    assert batch["input"].shape == (5, 12)
    assert batch["labels"].shape == ((5,) if name == "token-order" else (5, 12))
    assert batch["input"].min() >= 0 and batch["input"].max() < 9


@pytest.mark.parametrize("loader", [load_token_order, load_markov_tokens])
def test_deterministic_by_seed_with_disjoint_streams(loader):
    first, again, other = loader(seed=3), loader(seed=3), loader(seed=4)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.data, b.data)
        np.testing.assert_array_equal(a.label_values, b.label_values)
    assert not np.array_equal(first[0].data, other[0].data)
    assert not np.array_equal(first[0].data[:1024], first[1].data)   # train ≠ test


def test_token_order_is_what_the_docstring_says():
    train, test = load_token_order(sequence_length=20, vocab=6, min_length=5,
                                   train_samples=2000, test_samples=10)
    x, y = train.data, train.label_values
    assert np.count_nonzero(y) == 1000                          # exactly balanced
    assert np.all((x == TOKEN_A).sum(1) == 1) and np.all((x == TOKEN_B).sum(1) == 1)
    a, b = (x == TOKEN_A).argmax(1), (x == TOKEN_B).argmax(1)
    np.testing.assert_array_equal(y, (a < b).astype(np.int64))
    lengths = (x != PAD).sum(1)
    assert lengths.min() == 5 and lengths.max() == 20
    # padding only at the end: position t is padding iff t >= length
    np.testing.assert_array_equal(x == PAD, np.arange(20) >= lengths[:, None])
    assert set(np.unique(x[x > TOKEN_B])) == {3, 4, 5}
    assert train.pad_token == PAD and test.pad_token == PAD


def test_token_order_labels_are_independent_of_token_counts():
    """A bag of tokens (counts, the length) carries no information about the label: the
    label rate is ½ in every group of sequences with the same counts."""
    train, _ = load_token_order(train_samples=20000, test_samples=2)
    x, y = train.data, train.label_values
    lengths = (x != PAD).sum(1)
    for length in np.unique(lengths):
        rate = y[lengths == length].mean()
        n = np.count_nonzero(lengths == length)
        assert abs(rate - 0.5) <= 4 * 0.5 / np.sqrt(n)          # 4 standard errors


def test_markov_labels_are_the_next_tokens_and_follow_the_chain():
    train, test = load_markov_tokens(sequence_length=10, vocab=5, concentration=0.3,
                                     train_samples=20000, test_samples=50)
    np.testing.assert_array_equal(train.data[:, 1:], train.label_values[:, :-1])
    table = train.transitions
    assert table.shape == (5, 5, 5) and np.allclose(table.sum(-1), 1)
    assert test.transitions is table or np.array_equal(test.transitions, table)
    # empirical P(next | a, b) against the table, over all windows of the training set
    seq = np.concatenate([train.data, train.label_values[:, -1:]], axis=1)
    a, b, c = seq[:, :-2].ravel(), seq[:, 1:-1].ravel(), seq[:, 2:].ravel()
    counts = np.zeros((5, 5, 5))
    np.add.at(counts, (a, b, c), 1)
    seen = counts.sum(-1)
    empirical = counts / np.maximum(seen, 1)[..., None]
    # binomial standard error sqrt(p(1-p)/n) ≤ 0.5/sqrt(n); 5 of them bounds every cell
    bound = np.broadcast_to(5 * 0.5 / np.sqrt(np.maximum(seen, 1))[..., None], table.shape)
    visited = seen > 0
    assert visited.mean() > 0.9
    assert np.all(np.abs(empirical - table)[visited] <= bound[visited])


def test_bayes_accuracy_is_what_the_chain_allows():
    """The exact Bayes accuracy equals the accuracy of argmax P(· | a, b) on sampled data
    (within 4 standard errors), and a predictor that knows less scores lower."""
    train, _ = load_markov_tokens(sequence_length=12, vocab=6, concentration=0.2,
                                  train_samples=20000, test_samples=2)
    table, x, y = train.transitions, train.data, train.label_values
    prediction = np.zeros_like(y)
    prediction[:, 1:] = table[x[:, :-1], x[:, 1:]].argmax(-1)
    correct = prediction == y
    correct[:, 0] = y[:, 0] == 0          # position 0: any guess is right with p = 1/V
    error = 4 * np.sqrt(0.25 / correct.size)
    assert correct.mean() == pytest.approx(train.bayes_accuracy, abs=error)
    order1 = np.zeros((6, 6))             # P(next | previous token only), from the data
    np.add.at(order1, (x[:, 1:].ravel(), y[:, 1:].ravel()), 1)
    assert (order1[x[:, 1:], :].argmax(-1) == y[:, 1:]).mean() < correct[:, 1:].mean() - 0.02


def test_bayes_accuracy_limits():
    rng = np.random.default_rng(0)
    uniform = np.full((4, 4, 4), 0.25)
    assert bayes_accuracy(uniform, 8) == pytest.approx(0.25)
    deterministic = np.eye(4)[rng.integers(0, 4, (4, 4))]
    assert bayes_accuracy(deterministic, 8) == pytest.approx((0.25 + 7) / 8)
    table = markov_chain(4, 0.5, rng)
    tokens = markov_split(table, 3, 9, rng)
    assert tokens.shape == (3, 10) and tokens.max() < 4


@pytest.mark.parametrize("loader, options, message", [
    (load_token_order, {"vocab": 3}, "vocab must be at least 4"),
    (load_token_order, {"sequence_length": 1}, "sequence_length must be at least 2"),
    (load_token_order, {"min_length": 40}, "min_length must be in \\[2, sequence_length=16\\]"),
    (load_token_order, {"train_samples": 0}, "must be positive"),
    (load_markov_tokens, {"concentration": 0}, "concentration must be positive"),
    (load_markov_tokens, {"vocab": 1}, "vocab must be at least 2"),
])
def test_bad_options(loader, options, message):
    with pytest.raises(Deep500Error, match=message):
        loader(**options)
