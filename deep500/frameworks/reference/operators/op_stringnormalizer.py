"""StringNormalizer: a [C] or [1, C] string tensor without the ``stopwords`` (compared
case-insensitively unless ``is_case_sensitive``), then lower-cased, upper-cased or left
as is (``case_change_action`` LOWER, UPPER, NONE). Where every string is dropped, the
output is one empty string, [1] or [1, 1].
https://onnx.ai/onnx/operators/onnx__StringNormalizer.html

Case is changed and compared with Python's Unicode rules (``str.lower``, ``str.upper``)
whatever ``locale`` names."""
from deep500.frameworks.reference.operators._op_common_text import string_array, strings
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError

_CHANGES = {"NONE": lambda s: s, "LOWER": str.lower, "UPPER": str.upper}


@register("StringNormalizer")
class StringNormalizer(ReferenceOp):
    defaults = {"case_change_action": "NONE", "is_case_sensitive": 0, "locale": None,
                "stopwords": None}

    def forward(self, X):
        X = strings(X, self.op_type, "X")
        if not (X.ndim == 1 or X.ndim == 2 and X.shape[0] == 1):
            raise ShapeError(f"{self.op_type}: X must be [C] or [1, C], got shape "
                             f"{list(X.shape)}")
        change = _CHANGES.get(self.attr("case_change_action"))
        if change is None:
            raise Deep500Error(f"{self.op_type}: case_change_action="
                               f"{self.attr('case_change_action')!r} is not one of "
                               f"{sorted(_CHANGES)}")
        sensitive = bool(self.attr("is_case_sensitive"))
        fold = (lambda s: s) if sensitive else str.lower
        stopwords = {fold(w) for w in self.attr("stopwords") or ()}
        kept = [change(s) for s in X.reshape(-1) if fold(s) not in stopwords] or [""]
        return string_array(kept, (len(kept),) if X.ndim == 1 else (1, len(kept)))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]   # strings have no gradient
