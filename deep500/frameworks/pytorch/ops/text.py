"""The text family in PyTorch: StringConcat, RegexFullMatch, StringNormalizer and
StringSplit (https://onnx.ai/onnx/operators/, newest opset).

Strings have no tensor type in PyTorch: the executor carries string tensors as NumPy
arrays of ``str`` (object dtype), and these operators work on them element by element
with Python's string methods; what they produce for other operators (RegexFullMatch's
booleans, StringSplit's counts) is a tensor again.
"""
from __future__ import annotations

import re

import numpy as np

from deep500.frameworks.pytorch._torch_common import text
from deep500.utils.errors import ShapeError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _strings(x) -> np.ndarray:
    """A string tensor as an array of str (bytes decoded as UTF-8)."""
    x = np.asarray(x, dtype=object)
    return np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else str(s),
                        otypes=[object])(x) if x.size else x


def _string_concat(x, y):
    return np.char.add(_strings(x).astype(np.str_), _strings(y).astype(np.str_)).astype(
        object)


def _string_split(x, delimiter, maxsplit: int):
    """(parts padded with "" to the most parts of any element, number of parts); an
    empty delimiter splits at runs of whitespace, dropping empty parts."""
    x = _strings(x)
    parts = [s.split(delimiter, maxsplit) for s in x.reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    padded = np.array([p + [""] * (width - len(p)) for p in parts], dtype=object)
    counts = torch.tensor([len(p) for p in parts], dtype=torch.int64)
    return padded.reshape(x.shape + (width,)), counts.reshape(x.shape)


def _normalizer(case_change: str, case_sensitive: bool, stopwords):
    """StringNormalizer of a [C] or [1, C] string tensor: the words of each element
    that are stop words (compared after the case change unless case_sensitive) are
    removed, elements left empty dropped (all dropped: one empty string), and the case
    changed (LOWER, UPPER or NONE)."""
    if case_change not in ("LOWER", "UPPER", "NONE"):
        raise ShapeError(f"StringNormalizer: case_change_action {case_change!r} is not "
                         f"LOWER, UPPER or NONE")
    change = {"LOWER": str.lower, "UPPER": str.upper, "NONE": lambda s: s}[case_change]
    stops = set(stopwords) if case_sensitive else {change(w) for w in stopwords}

    def normalize(x):
        x = _strings(x)
        if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
            raise ShapeError(f"StringNormalizer takes [C] or [1, C] strings, not shape "
                             f"{list(x.shape)}")
        kept = []
        for element in x.reshape(-1):
            words = element.split(" ")
            if case_sensitive:
                words = [change(w) for w in words if w not in stops]
            else:
                words = [w for w in map(change, words) if w not in stops]
            if " ".join(words):
                kept.append(" ".join(words))
        result = np.array(kept or [""], dtype=object)
        return result.reshape(1, -1) if x.ndim == 2 else result
    return normalize


class TextOps:
    """``visit_<op>`` of the text family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_stringconcat(self, op, network):
        """Elementwise X + Y, broadcast."""
        self._emit(op, _string_concat)

    def visit_regexfullmatch(self, op, network):
        """Whether each string matches ``pattern`` entirely (ONNX names RE2 syntax;
        Python's ``re`` reads the same for the patterns RE2 accepts)."""
        pattern = re.compile(text(op.attributes.get("pattern"), ""))

        def full_match(x):
            x = _strings(x)
            matched = [pattern.fullmatch(s) is not None for s in x.reshape(-1)]
            return torch.tensor(matched, dtype=torch.bool).reshape(x.shape)
        self._emit(op, full_match)

    def visit_stringnormalizer(self, op, network):
        a = op.attributes
        self._emit(op, _normalizer(text(a.get("case_change_action"), "NONE"),
                                   bool(a.get("is_case_sensitive")),
                                   [text(w, "") for w in a.get("stopwords") or []]))

    def visit_stringsplit(self, op, network):
        """Each string split at ``delimiter`` (empty or absent: at whitespace) at most
        ``maxsplit`` times; Y holds the parts, Z their number."""
        delimiter = text(op.attributes.get("delimiter"), "") or None
        maxsplit = op.attributes.get("maxsplit")
        maxsplit = -1 if maxsplit is None else int(maxsplit)
        self._emit(op, lambda x: _string_split(x, delimiter, maxsplit))


__all__ = ["TextOps"]
