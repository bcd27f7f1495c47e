"""TensorFlowVisitor: the text family (``deep500/frameworks/families.py``), string
operators and text features: https://onnx.ai/onnx/operators/ (RegexFullMatch,
StringConcat, StringNormalizer, StringSplit, TfIdfVectorizer). Strings are ``tf.string``
tensors (UTF-8) computed with ``tf.strings``; case changes follow Unicode's rules
whatever ``locale`` names, as the reference executor's (Python's ``str``) do.
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _text
from deep500.utils.errors import Deep500Error, ShapeError


_CASE_CHANGES = {"NONE": lambda s: s,
                 "LOWER": lambda s: tf.strings.lower(s, encoding="utf-8"),
                 "UPPER": lambda s: tf.strings.upper(s, encoding="utf-8")}


class TextOps:
    """``visit_<op>`` of the text family, by operator name, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_regexfullmatch(self, op, network) -> None:
        """RegexFullMatch: true for each string ``pattern`` (RE2, which
        ``tf.strings.regex_full_match`` reads, as ONNX names) matches whole."""
        pattern = _text(op.attributes.get("pattern"), "")
        self._emit_node(op, lambda x: tf.strings.regex_full_match(x, pattern))

    def visit_stringconcat(self, op, network) -> None:
        """StringConcat: X and Y joined elementwise, broadcasting."""
        self._emit_node(op, lambda x, y: tf.add(tf.convert_to_tensor(x, tf.string),
                                                tf.convert_to_tensor(y, tf.string)))

    def visit_stringnormalizer(self, op, network) -> None:
        """StringNormalizer: a [C] or [1, C] string tensor without the ``stopwords``
        (compared case-insensitively unless ``is_case_sensitive``), then lower-cased,
        upper-cased or left as is (``case_change_action``); where every string is
        dropped, one empty string, [1] or [1, 1]."""
        a = op.attributes
        action = _text(a.get("case_change_action"), "NONE")
        if action not in _CASE_CHANGES:
            raise self.node_error(op, f"case_change_action={action!r} is not one of "
                                      f"{sorted(_CASE_CHANGES)}", Deep500Error)
        change = _CASE_CHANGES[action]
        fold = _CASE_CHANGES["NONE" if a.get("is_case_sensitive") else "LOWER"]
        stopwords = [_text(w, "") for w in a.get("stopwords") or ()]

        def normalize(x):
            x = tf.convert_to_tensor(x, tf.string)
            if not (len(x.shape) == 1 or len(x.shape) == 2 and x.shape[0] == 1):
                raise self.node_error(op, f"X must be [C] or [1, C], got shape "
                                          f"{list(x.shape)}", ShapeError)
            flat = tf.reshape(x, [-1])
            if stopwords:
                dropped = tf.reduce_any(tf.equal(fold(flat)[:, None],
                                                 fold(tf.constant(stopwords))), axis=1)
                flat = tf.boolean_mask(flat, ~dropped)
            kept = tf.cond(tf.size(flat) > 0, lambda: change(flat),
                           lambda: tf.constant([""]))
            return kept if len(x.shape) == 1 else kept[tf.newaxis]
        self._emit_node(op, normalize)

    def visit_stringsplit(self, op, network) -> None:
        """StringSplit: each string split at ``delimiter`` into at most ``maxsplit`` + 1
        parts; Y has one more axis, as long as the most parts of any string, padded with
        empty strings, Z counts each string's parts. Without a (non-empty) delimiter, runs
        of whitespace separate and leading and trailing whitespace is dropped (Python's
        ``str.split``, which ``tf.strings.split`` follows)."""
        separator = _text(op.attributes.get("delimiter"), "") or None
        maxsplit = op.attributes.get("maxsplit")
        maxsplit = -1 if maxsplit is None else int(maxsplit)

        def split(x):
            x = tf.convert_to_tensor(x, tf.string)
            parts = tf.strings.split(tf.reshape(x, [-1]), sep=separator, maxsplit=maxsplit)
            if separator is None:
                # str.split() gives no empty strings; tf.strings.split (TF 2.21) leaves an
                # empty remainder where a string ends at its maxsplit-th separator.
                parts = tf.ragged.boolean_mask(parts, tf.not_equal(parts, ""))
            padded = parts.to_tensor(default_value="")
            shape = tf.shape(x, out_type=tf.int64)
            y = tf.reshape(padded, tf.concat([shape, tf.shape(padded, out_type=tf.int64)[1:]],
                                             0))
            counts = tf.reshape(parts.row_lengths(), shape)
            return (y, counts) if len(op.outputs) > 1 else y
        self._emit_node(op, split)

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
