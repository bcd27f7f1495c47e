"""LabelEncoder (domain ai.onnx.ml, opset 4): each element of X replaced by the value
paired with it in ``keys_*`` / ``values_*`` (floats, int64s, strings or a tensor), by
the default of the values' type where it is no key. A NaN key matches every NaN; of
repeated keys, the last counts. https://onnx.ai/onnx/operators/onnx_aionnxml_LabelEncoder.html

Defaults: ``default_tensor`` where the values are a tensor (else -1, -0.0 or "_Unused"
by their type), else ``default_int64``, ``default_float``, ``default_string``.
"""
import math

import numpy as np

from deep500.frameworks.reference.operators._op_common_text import string_array, text
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error

_KINDS = ("floats", "int64s", "strings", "tensor")


def _key(value):
    """A dictionary key that makes every NaN one key."""
    if isinstance(value, (str, bytes)):
        return text(value)
    number = value.item() if isinstance(value, np.generic) else value
    return "NaN" if isinstance(number, float) and math.isnan(number) else number


@register("LabelEncoder", domain="ai.onnx.ml")
class LabelEncoder(ReferenceOp):
    defaults = {**{f"keys_{kind}": None for kind in _KINDS},
                **{f"values_{kind}": None for kind in _KINDS},
                "default_float": -0.0, "default_int64": -1, "default_string": "_Unused",
                "default_tensor": None}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        keys, values = self._given("keys"), self._given("values")
        if len(keys) != len(values):
            raise Deep500Error(f"{self.op_type}: {len(keys)} keys but {len(values)} values; "
                               f"keys_* and values_* pair up one to one")
        self._mapping = {_key(k): v for k, v in zip(keys, values)}
        self._dtype, self._default = self._value_type()

    def _given(self, prefix: str) -> list:
        given = [kind for kind in _KINDS if self.attr(f"{prefix}_{kind}") is not None]
        if len(given) != 1:
            raise Deep500Error(f"{self.op_type}: give exactly one of "
                               f"{', '.join(f'{prefix}_{k}' for k in _KINDS)}, got {given}")
        values = self.attr(f"{prefix}_{given[0]}")
        return list(np.asarray(values).reshape(-1)) if given[0] == "tensor" else list(values)

    def _value_type(self):
        """The output's dtype and the default value."""
        if self.attr("values_tensor") is not None:
            dtype = np.asarray(self.attr("values_tensor")).dtype
            default = self.attr("default_tensor")
            if default is not None:
                return dtype, np.asarray(default).reshape(-1)[0]
            kind = "strings" if dtype.kind in "OUS" else "floats" if dtype.kind == "f" else "int"
        else:
            kind = next(k for k in _KINDS if self.attr(f"values_{k}") is not None)
            dtype = {"floats": np.dtype(np.float32), "int64s": np.dtype(np.int64),
                     "strings": np.dtype(object)}[kind]
        default = {"floats": self.attr("default_float"), "strings": self.attr("default_string")
                   }.get(kind, self.attr("default_int64"))
        return (np.dtype(object) if dtype.kind in "OUS" else dtype), default

    def forward(self, X):
        X = np.asarray(X)
        mapped = [self._mapping.get(_key(x), self._default) for x in X.reshape(-1)]
        if self._dtype == object:
            return string_array([text(v) for v in mapped], X.shape)
        return np.array(mapped, dtype=self._dtype).reshape(X.shape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]   # a lookup table of discrete keys has no gradient
