"""TensorFlowVisitor: the text family (``deep500/frameworks/families.py``), string
operators and text features: https://onnx.ai/onnx/operators/onnx__TfIdfVectorizer.html.
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _text


class TextOps:
    """``visit_<op>`` of the text family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_tfidfvectorizer(self, op, network) -> None:
        """TfIdfVectorizer: counts of the pool's n-grams (with skips) per row, weighted as
        TF, IDF or TFIDF (https://onnx.ai/onnx/operators/onnx__TfIdfVectorizer.html)."""
        a = op.attributes
        if a.get("pool_int64s") is None:
            raise self.node_error(op, "string n-gram pools (pool_strings) are not "
                                      "supported; use integer token ids (pool_int64s)")
        shortest, longest = int(a["min_gram_length"]), int(a["max_gram_length"])
        max_skip = int(a["max_skip_count"])
        mode = _text(a["mode"], "TF")
        pool = [int(v) for v in a["pool_int64s"]]
        starts = [int(v) for v in a["ngram_counts"]] + [len(pool)]
        indexes = [int(v) for v in a["ngram_indexes"]]
        size = max(indexes) + 1
        weights = (np.ones(size, np.float32) if a.get("weights") is None
                   else np.asarray(a["weights"], np.float32))
        groups, first = {}, 0   # n → (pool n-grams (P, n), their output columns (P, size))
        for n, (begin, end) in enumerate(zip(starts[:-1], starts[1:]), start=1):
            grams = np.asarray(pool[begin:end], np.int64).reshape(-1, n)
            columns = np.eye(size, dtype=np.float32)[indexes[first:first + len(grams)]]
            groups[n], first = (grams, columns), first + len(grams)

        def tfidf(x):
            x = tf.cast(x, tf.int64)
            vector = len(x.shape) == 1
            rows = x[None] if vector else x
            length = rows.shape[1]
            total = tf.zeros(tf.stack([tf.shape(rows)[0], size]), tf.float32)
            for n in range(shortest, longest + 1):
                if n not in groups or not len(groups[n][0]):
                    continue
                grams, columns = groups[n]
                for distance in range(1, max_skip + 2) if n > 1 else (1,):
                    starts_ = length - (n - 1) * distance
                    if starts_ <= 0:
                        continue
                    windows = tf.stack([rows[:, j * distance:j * distance + starts_]
                                        for j in range(n)], axis=-1)         # (B, L, n)
                    hits = tf.reduce_all(tf.equal(windows[:, :, None, :], grams), axis=-1)
                    counts = tf.reduce_sum(tf.cast(hits, tf.float32), axis=1)  # (B, P)
                    total = total + tf.linalg.matmul(counts, columns)
            if mode == "IDF":
                total = tf.where(total > 0, weights, tf.zeros_like(total))
            elif mode == "TFIDF":
                total = total * weights
            return total[0] if vector else total
        self.emit(tfidf, [self.key(op.inputs[0])], op.outputs[0])
