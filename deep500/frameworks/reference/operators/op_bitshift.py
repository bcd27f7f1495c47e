"""BitShift: Z = X << Y (direction "LEFT") or X >> Y ("RIGHT") for integer tensors with
multidirectional broadcasting. A right shift of a signed type is arithmetic (it copies
the sign bit); a shift by a negative amount or by the type's width or more gives what the
sign extension alone gives: -1 for a right shift of a negative X, 0 otherwise.
https://onnx.ai/onnx/operators/onnx__BitShift.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_compare import (BinaryNoGradient,
                                                                       INTEGER)
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@register("BitShift")
class BitShift(BinaryNoGradient):
    defaults = {"direction": None}
    kinds = INTEGER

    def __init__(self, **attributes):
        super().__init__(**attributes)
        direction = self.attr("direction")
        if direction is None or _text(direction) not in ("LEFT", "RIGHT"):
            raise Deep500Error(f"BitShift: the attribute direction must be \"LEFT\" or "
                               f"\"RIGHT\", got {direction!r}")
        self.left = _text(direction) == "LEFT"

    def _compute(self, X, Y):
        bits = X.dtype.itemsize * 8
        # Shift only by in-range amounts: NumPy (and C) leave larger shifts undefined.
        in_range = (Y >= 0) & (Y < bits)
        amount = np.where(in_range, Y, 0).astype(X.dtype)
        if self.left:
            return np.where(in_range, np.left_shift(X, amount), X.dtype.type(0))
        # Out of range, a right shift leaves only copies of the sign bit: -1 or 0.
        sign_fill = np.right_shift(X, X.dtype.type(bits - 1)) if X.dtype.kind == "i" else 0
        return np.where(in_range, np.right_shift(X, amount), sign_fill).astype(X.dtype)
