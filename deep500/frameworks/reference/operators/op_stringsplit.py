"""StringSplit: each string split at ``delimiter`` into at most ``maxsplit`` + 1 parts
(all of them where ``maxsplit`` is not given). Output Y has one more dimension, as long
as the most parts of any string, padded with empty strings; Z counts each string's parts.
Consecutive delimiters delimit empty strings, except where the delimiter is not given or
empty: then runs of whitespace separate, and leading and trailing whitespace is dropped
(Python's ``str.split`` with and without ``sep``).
https://onnx.ai/onnx/operators/onnx__StringSplit.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_text import string_array, strings
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("StringSplit")
class StringSplit(ReferenceOp):
    defaults = {"delimiter": None, "maxsplit": None}

    def forward(self, X):
        X = strings(X, self.op_type, "X")
        separator = self.attr("delimiter") or None
        maxsplit = self.attr("maxsplit")
        parts = [s.split(separator, -1 if maxsplit is None else maxsplit)
                 for s in X.reshape(-1)]
        width = max((len(p) for p in parts), default=0)
        padded = [part for p in parts for part in p + [""] * (width - len(p))]
        counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(X.shape)
        return string_array(padded, X.shape + (width,)), counts

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]   # strings have no gradient
