"""TfIdfVectorizer: for each row of a [C] or [N, C] tensor of integers or strings, how
often each n-gram of the pool occurs, as a float32 vector indexed by ``ngram_indexes``.
https://onnx.ai/onnx/operators/onnx__TfIdfVectorizer.html

The pool (``pool_int64s`` or ``pool_strings``) lists the n-grams by length:
``ngram_counts[k]`` is where the n-grams of length k + 1 start in it; its i-th n-gram
counts into output element ``ngram_indexes[i]``. An n-gram of length n ≥ 2 is n tokens
d apart, for every distance d = 1 … ``max_skip_count`` + 1; single tokens are counted
once. Lengths from ``min_gram_length`` to ``max_gram_length`` are counted. ``mode`` TF
gives the counts, IDF 1 where the count is positive times ``weights[i]``, TFIDF the count
times ``weights[i]`` (weights default to 1).
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_text import text
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError


@register("TfIdfVectorizer")
class TfIdfVectorizer(ReferenceOp):
    defaults = {"max_gram_length": None, "max_skip_count": None, "min_gram_length": None,
                "mode": None, "ngram_counts": None, "ngram_indexes": None,
                "pool_int64s": None, "pool_strings": None, "weights": None}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        if self.attr("mode") not in ("TF", "IDF", "TFIDF"):
            raise Deep500Error(f"{self.op_type}: mode={self.attr('mode')!r} is not TF, IDF "
                               f"or TFIDF")
        self._pool = self._ngrams()
        self._width = max(self.attr("ngram_indexes")) + 1

    def _ngrams(self) -> dict:
        """{n-gram (a tuple of tokens): its position in the pool}."""
        strings, integers = self.attr("pool_strings"), self.attr("pool_int64s")
        if (strings is None) == (integers is None):
            raise Deep500Error(f"{self.op_type}: give exactly one of pool_strings and "
                               f"pool_int64s")
        pool = [text(s) for s in strings] if strings is not None else list(integers)
        starts = list(self.attr("ngram_counts")) + [len(pool)]
        ngrams = {}
        for length, (start, end) in enumerate(zip(starts, starts[1:]), start=1):
            for first in range(start, end, length):
                ngrams[tuple(pool[first:first + length])] = len(ngrams)
        return ngrams

    def _row(self, tokens: list) -> np.ndarray:
        counts = np.zeros(len(self._pool))
        for n in range(self.attr("min_gram_length"), self.attr("max_gram_length") + 1):
            distances = range(1, self.attr("max_skip_count") + 2) if n > 1 else (1,)
            for d in distances:
                for start in range(len(tokens) - (n - 1) * d):
                    position = self._pool.get(tuple(tokens[start:start + n * d:d][:n]))
                    if position is not None:
                        counts[position] += 1
        return counts

    def forward(self, X):
        X = np.asarray(X)
        if X.ndim not in (1, 2):
            raise ShapeError(f"{self.op_type}: X must be [C] or [N, C], got shape "
                             f"{list(X.shape)}")
        rows = X.reshape(-1, X.shape[-1]) if X.size else X.reshape(-1, 0)
        read = text if self.attr("pool_strings") is not None else int
        counts = np.array([self._row([read(t) for t in row]) for row in rows])
        counts = counts.reshape(len(rows), len(self._pool))
        weights = np.asarray(self.attr("weights") or np.ones(len(self._pool)))
        if self.attr("mode") == "IDF":
            counts = (counts > 0) * weights
        elif self.attr("mode") == "TFIDF":
            counts = counts * weights
        Y = np.zeros((len(rows), self._width), np.float32)
        Y[:, np.asarray(self.attr("ngram_indexes"))] = counts
        return Y.reshape(self._width) if X.ndim == 1 else Y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]   # counts of discrete tokens have no gradient
