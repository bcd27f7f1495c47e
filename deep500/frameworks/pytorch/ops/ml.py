"""The ml family in PyTorch (domain ai.onnx.ml): Binarizer, ArrayFeatureExtractor and
LabelEncoder (https://onnx.ai/onnx/operators/onnx_aionnxml_Binarizer.html and the
pages of the others).
"""
from __future__ import annotations

import numpy as np
import onnx.numpy_helper

from deep500.frameworks.pytorch._torch_common import text
from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _array_feature_extractor(x, indices):
    """The elements of ``x``'s last axis at ``indices`` (all of them, flattened); a 1-D
    ``x`` gives one row, as onnxruntime and onnx's reference do."""
    picked = x.index_select(-1, indices.reshape(-1).long())
    return picked.reshape(1, -1) if x.dim() == 1 else picked


# LabelEncoder's attributes by the kind of value they hold, and the defaults of the
# default_* attributes (https://onnx.ai/onnx/operators/onnx_aionnxml_LabelEncoder.html)
_KINDS = (("tensor", None), ("strings", "_Unused"), ("int64s", -1), ("floats", -0.0))


def _labels(attributes: dict, prefix: str):
    """(values as a list, NumPy dtype) of LabelEncoder's ``prefix``_* attribute."""
    for kind, _ in _KINDS:
        given = attributes.get(f"{prefix}_{kind}")
        if given is None or (kind != "tensor" and not len(given)):
            continue
        if kind == "tensor":
            array = onnx.numpy_helper.to_array(given)
            return array.reshape(-1).tolist(), array.dtype
        if kind == "strings":
            return [text(v, "") for v in given], np.dtype(object)
        return list(given), np.dtype(np.int64 if kind == "int64s" else np.float32)
    return [], None


def _label_default(attributes: dict, dtype):
    given = attributes.get("default_tensor")
    if given is not None:
        return onnx.numpy_helper.to_array(given).reshape(-1)[0].item()
    kind = ("strings" if dtype == object else
            "int64s" if np.issubdtype(dtype, np.integer) else "floats")
    name = {"strings": "default_string", "int64s": "default_int64",
            "floats": "default_float"}[kind]
    value = attributes.get(name)
    return dict(_KINDS)[kind] if value is None else (
        text(value, "") if kind == "strings" else value)


def _label_encoder(attributes: dict):
    """LabelEncoder: each element of X looked up among the keys, replaced by the value
    at the same position or by the default. A table lookup, element by element in
    Python (keys and values may be strings, which have no tensor type): strings come
    out as a NumPy array of str, numbers as a tensor of the values' type."""
    keys, _ = _labels(attributes, "keys")
    values, dtype = _labels(attributes, "values")
    table = dict(zip(keys, values))
    default = _label_default(attributes, dtype)

    def encode(x):
        elements = (x.reshape(-1).tolist() if isinstance(x, torch.Tensor) else
                    [s.decode() if isinstance(s, bytes) else s for s in x.reshape(-1)])
        encoded = np.array([table.get(e, default) for e in elements], dtype=dtype)
        encoded = encoded.reshape(tuple(x.shape))
        return encoded if dtype == object else torch.from_numpy(encoded)
    return encode


class MlOps:
    """``visit_<op>`` of the ml family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_binarizer(self, op, network):
        """1 where X > threshold, else 0, in X's type."""
        threshold = float(op.attributes.get("threshold") or 0.0)
        self._emit(op, lambda x: (x > threshold).to(x.dtype))

    def visit_arrayfeatureextractor(self, op, network):
        self._emit(op, _array_feature_extractor)


    def visit_labelencoder(self, op, network):
        self._emit(op, _label_encoder(op.attributes))


__all__ = ["MlOps"]
