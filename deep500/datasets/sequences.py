"""Generated token-sequence datasets (nothing is downloaded), for the zoo's
``transformer``, ``lstm`` and ``gpt``.

Samples are **int64 token ids** of shape [T] fed to ``input``; every split is a pure
function of ``seed`` (the training split is drawn from ``default_rng([seed, 1])``, the
test split from ``default_rng([seed, 2])``, shared structure from ``[seed, 0]``).

``token-order`` (classification, 2 classes): does token A come before token B?
    Token 0 is padding, 1 is A, 2 is B, 3..vocab−1 are fillers. A sequence has a length
    L drawn uniformly from [min_length, T]; its L tokens are uniform fillers with exactly
    one A and one B at two distinct uniform positions, then T − L padding tokens. The
    label is 1 when A precedes B, else 0; the classes are exactly balanced (an even
    number of samples splits evenly). A model that sees tokens without their order
    (a bag of tokens, a mean of per-position features without attention) scores 50%:
    the label lives only in the relative position of two tokens, so it takes attention
    (or a recurrent memory) over positions.

``markov-tokens`` (next-token prediction, ``vocab`` classes per position): sequences of
    T + 1 tokens from an order-2 Markov chain over ``vocab`` tokens whose transition
    rows P(· | a, b) are drawn once, from ``[seed, 0]``, from a symmetric Dirichlet with
    ``concentration`` (small values make the chain nearly deterministic); the first two
    tokens are uniform. The input is tokens 0..T−1, the labels [T] are tokens 1..T, so a
    causal model predicts each next token from the tokens before it. ``bayes_accuracy``
    is the accuracy of the best possible predictor (which knows the chain), averaged
    over the T positions, computed exactly from the chain.
"""
from __future__ import annotations

import numpy as np

from deep500.lv2_training.dataset import NumpyDataset
from deep500.utils.errors import Deep500Error

PAD, TOKEN_A, TOKEN_B = 0, 1, 2


class TokenDataset(NumpyDataset):
    """A NumpyDataset of int64 token sequences [T] with its ``vocab`` size (and the
    ``pad_token`` id, ``None`` where there is no padding)."""

    def __init__(self, data, labels, vocab: int, classes: int, pad_token: int | None,
                 input_node: str = "input", label_node: str = "labels",
                 name: str | None = None):
        super().__init__(data, labels, input_node, label_node, classes, name)
        self.vocab = int(vocab)
        self.pad_token = pad_token


def _check(name: str, sequence_length: int, vocab: int, train_samples: int,
           test_samples: int, smallest_vocab: int, shortest: int) -> None:
    if int(vocab) < smallest_vocab:
        raise Deep500Error(f"{name}: vocab must be at least {smallest_vocab}, got {vocab}")
    if int(sequence_length) < shortest:
        raise Deep500Error(f"{name}: sequence_length must be at least {shortest}, got "
                           f"{sequence_length}")
    if int(train_samples) < 1 or int(test_samples) < 1:
        raise Deep500Error(f"{name}: train_samples and test_samples must be positive, got "
                           f"{train_samples} and {test_samples}")


# -- token-order ---------------------------------------------------------------------
def token_order_split(samples: int, sequence_length: int, vocab: int, min_length: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(tokens [samples, T], labels [samples]) of the token-order task (see the module)."""
    steps = sequence_length
    lengths = rng.integers(min_length, steps + 1, samples)
    tokens = rng.integers(TOKEN_B + 1, vocab, (samples, steps))
    first = rng.integers(0, lengths)                  # two distinct positions below L
    second = rng.integers(0, lengths - 1)
    second += second >= first
    early, late = np.minimum(first, second), np.maximum(first, second)
    labels = rng.permutation(np.arange(samples) % 2).astype(np.int64)
    rows = np.arange(samples)
    tokens[rows, early] = np.where(labels == 1, TOKEN_A, TOKEN_B)
    tokens[rows, late] = np.where(labels == 1, TOKEN_B, TOKEN_A)
    tokens[np.arange(steps) >= lengths[:, None]] = PAD
    return tokens.astype(np.int64), labels


def load_token_order(sequence_length: int = 16, vocab: int = 8, min_length: int | None = None,
                     train_samples: int = 4096, test_samples: int = 1024, seed: int = 0,
                     input_node: str = "input", label_node: str = "labels"):
    """``(train, test)`` TokenDatasets of the token-order task (see the module);
    ``min_length`` defaults to half the sequence length (at least 2)."""
    _check("token-order", sequence_length, vocab, train_samples, test_samples, 4, 2)
    steps, vocab = int(sequence_length), int(vocab)
    min_length = max(2, steps // 2) if min_length is None else int(min_length)
    if not 2 <= min_length <= steps:
        raise Deep500Error(f"token-order: min_length must be in [2, sequence_length={steps}]"
                           f", got {min_length}")
    return tuple(
        TokenDataset(*token_order_split(int(samples), steps, vocab, min_length,
                                        np.random.default_rng([int(seed), stream])),
                     vocab, 2, PAD, input_node, label_node, f"token-order-{split}")
        for stream, samples, split in ((1, train_samples, "train"), (2, test_samples, "test")))


def token_order_shape(sequence_length: int = 16, vocab: int = 8, train_samples: int = 4096,
                      test_samples: int = 1024, **_options) -> dict:
    return {"input": (int(sequence_length),), "classes": 2, "vocab": int(vocab),
            "train_samples": int(train_samples), "test_samples": int(test_samples),
            "dtype": "int64", "label_dtype": "int64"}


# -- markov-tokens -------------------------------------------------------------------
def markov_chain(vocab: int, concentration: float, rng: np.random.Generator) -> np.ndarray:
    """Transition table [vocab, vocab, vocab]: row (a, b) is P(next | a, b)."""
    return rng.dirichlet(np.full(vocab, float(concentration)), size=(vocab, vocab))


def markov_split(table: np.ndarray, samples: int, sequence_length: int,
                 rng: np.random.Generator) -> np.ndarray:
    """[samples, T + 1] token sequences of the chain ``table``."""
    vocab = len(table)
    tokens = np.empty((samples, sequence_length + 1), np.int64)
    tokens[:, :2] = rng.integers(0, vocab, (samples, 2))
    cumulative = np.cumsum(table, axis=-1)
    for t in range(2, sequence_length + 1):
        rows = cumulative[tokens[:, t - 2], tokens[:, t - 1]]
        drawn = rng.random(samples)[:, None]
        tokens[:, t] = np.minimum((rows < drawn).sum(axis=1), vocab - 1)
    return tokens


def bayes_accuracy(table: np.ndarray, sequence_length: int) -> float:
    """Accuracy of predicting each next token by argmax P(· | previous two), averaged
    over the T positions; position 0 (one token seen, its successor uniform) scores
    1/vocab. The distribution of token pairs is propagated exactly through the chain."""
    vocab = len(table)
    pairs = np.full((vocab, vocab), 1.0 / vocab ** 2)
    best = table.max(axis=-1)
    correct = [1.0 / vocab]
    for _ in range(1, sequence_length):
        correct.append(float((pairs * best).sum()))
        pairs = np.einsum("ab,abc->bc", pairs, table)
    return float(np.mean(correct))


def load_markov_tokens(sequence_length: int = 16, vocab: int = 8, concentration: float = 0.1,
                       train_samples: int = 4096, test_samples: int = 1024, seed: int = 0,
                       input_node: str = "input", label_node: str = "labels"):
    """``(train, test)`` TokenDatasets of next-token prediction on a seeded order-2
    Markov chain (see the module); labels have the shape [T] of the inputs."""
    _check("markov-tokens", sequence_length, vocab, train_samples, test_samples, 2, 2)
    if not float(concentration) > 0:
        raise Deep500Error(f"markov-tokens: concentration must be positive, got "
                           f"{concentration}")
    steps, vocab = int(sequence_length), int(vocab)
    table = markov_chain(vocab, concentration, np.random.default_rng([int(seed), 0]))
    optimum = bayes_accuracy(table, steps)
    datasets = []
    for stream, samples, split in ((1, train_samples, "train"), (2, test_samples, "test")):
        tokens = markov_split(table, int(samples), steps, np.random.default_rng([int(seed),
                                                                                 stream]))
        dataset = TokenDataset(np.ascontiguousarray(tokens[:, :-1]),
                               np.ascontiguousarray(tokens[:, 1:]), vocab, vocab, None,
                               input_node, label_node, f"markov-tokens-{split}")
        dataset.transitions, dataset.bayes_accuracy = table, optimum
        datasets.append(dataset)
    return tuple(datasets)


def markov_tokens_shape(sequence_length: int = 16, vocab: int = 8, train_samples: int = 4096,
                        test_samples: int = 1024, **_options) -> dict:
    return {"input": (int(sequence_length),), "classes": int(vocab), "vocab": int(vocab),
            "train_samples": int(train_samples), "test_samples": int(test_samples),
            "dtype": "int64", "label_dtype": "int64"}
