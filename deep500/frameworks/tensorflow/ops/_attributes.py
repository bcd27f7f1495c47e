"""Reading a node's attributes in the TensorFlow operator families (the parser has
normalised every node to the newest opset's form; an attribute not given is None)."""
from __future__ import annotations


def _attr(op, name, default):
    value = op.attributes.get(name)
    return default if value is None else value


def _text(value, default: str) -> str:
    """A string attribute (bytes in ONNX) as text; ``default`` when not given."""
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)
