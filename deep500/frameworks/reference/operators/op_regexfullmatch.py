"""RegexFullMatch: true for each string that the regular expression ``pattern`` matches
whole. https://onnx.ai/onnx/operators/onnx__RegexFullMatch.html

ONNX names RE2's syntax; Python's ``re``, which compiles the pattern here, reads the
same for the common constructs (classes, \\w \\d \\s \\b, groups, alternation, counted
repetition). A pattern Python cannot compile is an error naming it.
"""
import re

import numpy as np

from deep500.frameworks.reference.operators._op_common_text import strings
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error


@register("RegexFullMatch")
class RegexFullMatch(ReferenceOp):
    defaults = {"pattern": None}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        try:
            self._regex = re.compile(self.attr("pattern") or "")
        except re.error as exc:
            raise Deep500Error(f"{self.op_type}: pattern {self.attr('pattern')!r} is not a "
                               f"regular expression Python's re reads: {exc}") from None

    def forward(self, X):
        X = strings(X, self.op_type)
        matches = [self._regex.fullmatch(s) is not None for s in X.reshape(-1)]
        return np.array(matches, dtype=bool).reshape(X.shape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]   # strings have no gradient
