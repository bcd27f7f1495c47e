"""The logic family in PyTorch: comparisons, logical and bitwise operators, IsNaN/IsInf
and Where (https://onnx.ai/onnx/operators/, newest opset). Unsigned 16/32/64-bit integers
are compared and shifted as signed ones with the same results (``_unsigned``).
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.pytorch._torch_common import calls
from deep500.frameworks.pytorch.ops._unsigned import INT64_MAX, NARROW_UNSIGNED, compare
from deep500.utils.errors import ShapeError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _equal(a, b):
    """Tensors by torch.eq; strings, which have no tensor type and are carried as NumPy
    arrays of str, by NumPy's elementwise equality (a bool tensor either way)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return torch.from_numpy(np.equal(a, b))
    return torch.eq(a, b)


def _bitwise_not(x):
    if x.dtype in NARROW_UNSIGNED:
        return torch.bitwise_not(x.long()).to(x.dtype)
    if x.dtype == torch.uint64:
        return torch.bitwise_not(x.view(torch.int64)).view(torch.uint64)
    return torch.bitwise_not(x)


def _shift(left: bool):
    """Logical shifts (https://onnx.ai/onnx/operators/onnx__BitShift.html); uint64 on its
    bits read as int64, whose right shift is arithmetic: the top bit is cleared first."""
    def shift(x, s):
        if x.dtype in NARROW_UNSIGNED:
            wide = x.long()
            shifted = wide << s.long() if left else wide >> s.long()
            return shifted.to(x.dtype)
        if x.dtype == torch.uint64:
            bits, count = x.view(torch.int64), s.view(torch.int64)
            if left:
                return (bits << count).view(torch.uint64)
            logical = ((bits >> 1) & INT64_MAX) >> (count - 1).clamp(min=0)
            return torch.where(count == 0, bits, logical).view(torch.uint64)
        return x << s if left else x >> s
    return shift


class LogicOps:
    """``visit_<op>`` of the logic family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    visit_not = calls(torch.logical_not)
    visit_and = calls(torch.logical_and)
    visit_or = calls(torch.logical_or)
    visit_xor = calls(torch.logical_xor)
    visit_equal = calls(_equal)
    visit_less = calls(compare(torch.lt))
    visit_greater = calls(compare(torch.gt))
    visit_lessorequal = calls(compare(torch.le))
    visit_greaterorequal = calls(compare(torch.ge))
    visit_where = calls(torch.where)
    visit_isnan = calls(torch.isnan)
    visit_bitwiseand = calls(torch.bitwise_and)
    visit_bitwiseor = calls(torch.bitwise_or)
    visit_bitwisexor = calls(torch.bitwise_xor)
    visit_bitwisenot = calls(_bitwise_not)

    def visit_isinf(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__IsInf.html"""
        positive = bool(op.attributes.get("detect_positive", 1))
        negative = bool(op.attributes.get("detect_negative", 1))
        if positive and negative:
            self._emit(op, torch.isinf)
        elif positive:
            self._emit(op, torch.isposinf)
        elif negative:
            self._emit(op, torch.isneginf)
        else:
            self._emit(op, lambda x: torch.zeros_like(x, dtype=torch.bool))

    def visit_bitshift(self, op, network):
        """Logical shifts of unsigned integers.
        https://onnx.ai/onnx/operators/onnx__BitShift.html"""
        direction = op.attributes["direction"]
        if direction not in ("LEFT", "RIGHT"):
            raise self.node_error(op, f"direction must be 'LEFT' or 'RIGHT', not "
                                  f"{direction!r}", ShapeError)
        self._emit(op, _shift(direction == "LEFT"))


__all__ = ["LogicOps"]
