"""ONNX's positions in a sequence of tensors: SequenceAt and SequenceErase take one in
[-n, n - 1], SequenceInsert one in [-n, n] (n inserts at the back); a negative position
counts from the back. https://onnx.ai/onnx/operators/onnx__SequenceInsert.html
"""
from __future__ import annotations

from deep500.utils.errors import ShapeError


def sequence_position(index: int, length: int, op_type: str, inserting: bool = False) -> int:
    """``index`` as a Python list index in [0, length) ([0, length] when ``inserting``),
    or a ShapeError naming ``op_type``."""
    high = length if inserting else length - 1
    if not -length <= index <= high:
        raise ShapeError(f"{op_type}: position {index} is outside [{-length}, {high}] for a "
                         f"sequence of {length} tensors")
    return index + length if index < 0 else index


__all__ = ["sequence_position"]
