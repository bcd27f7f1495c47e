"""The math family in PyTorch: elementwise arithmetic and functions of one number
(https://onnx.ai/onnx/operators/, newest opset). Unsigned 16/32/64-bit integers are
computed as signed ones with the same results (``_unsigned``).
"""
from __future__ import annotations

import functools

from deep500.frameworks.pytorch._torch_common import calls
from deep500.frameworks.pytorch.ops._unsigned import by_value, is_unsigned, ordered, wrapping
from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _extreme(before):
    """Min (``before`` = lt) or Max (gt) of two tensors; unsigned ones by their order,
    others by torch.minimum/maximum (which propagate NaN as ONNX does)."""
    def extreme(a, b):
        if is_unsigned(a):
            return torch.where(before(ordered(a), ordered(b)), a, b)
        return (torch.minimum if before is torch.lt else torch.maximum)(a, b)
    return extreme


def _truncating_divide(a, b):
    """ONNX integer division truncates toward zero."""
    return torch.div(a, b) if a.is_floating_point() else torch.div(a, b,
                                                                    rounding_mode="trunc")


class MathOps:
    """``visit_<op>`` of the math family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    visit_add = calls(wrapping(torch.add))
    visit_sub = calls(wrapping(torch.sub))
    visit_mul = calls(wrapping(torch.mul))
    visit_sqrt = calls(torch.sqrt)
    visit_exp = calls(torch.exp)
    visit_log = calls(torch.log)
    visit_neg = calls(torch.neg)
    visit_abs = calls(torch.abs)
    visit_erf = calls(torch.erf)
    visit_reciprocal = calls(torch.reciprocal)
    visit_floor = calls(torch.floor)
    visit_ceil = calls(torch.ceil)
    visit_tanh = calls(torch.tanh)
    visit_sin = calls(torch.sin)
    visit_cos = calls(torch.cos)
    visit_tan = calls(torch.tan)
    visit_asin = calls(torch.asin)
    visit_acos = calls(torch.acos)
    visit_atan = calls(torch.atan)
    visit_sinh = calls(torch.sinh)
    visit_cosh = calls(torch.cosh)
    visit_asinh = calls(torch.asinh)
    visit_acosh = calls(torch.acosh)
    visit_atanh = calls(torch.atanh)
    visit_sign = calls(torch.sign)
    # Halves to even, as torch.round: https://onnx.ai/onnx/operators/onnx__Round.html
    visit_round = calls(torch.round)

    def visit_div(self, op, network):
        dtype = self._dtype(op.inputs[0])
        if dtype is not None and dtype.is_floating_point:
            self._emit(op, torch.div)
            return
        self._emit(op, by_value(_truncating_divide))

    def visit_pow(self, op, network):
        exponent = self._known(op.inputs[1])
        base_dtype = self._dtype(op.inputs[0])
        if exponent is not None and exponent.numel() == 1 and (
                base_dtype is not None and base_dtype.is_floating_point):
            value = exponent.item()
            self._emit(op, lambda x: torch.pow(x, value), op.inputs[:1])
            return

        def power(x, y):  # ONNX Pow has the base's type
            result = torch.pow(x, y)
            return result if result.dtype == x.dtype else result.to(x.dtype)
        self._emit(op, power)

    def visit_mod(self, op, network):
        """fmod=1: C fmod (sign of the dividend); fmod=0: sign of the divisor.
        https://onnx.ai/onnx/operators/onnx__Mod.html"""
        fn = torch.fmod if op.attributes.get("fmod") else torch.remainder
        self._emit(op, by_value(fn))

    def _variadic(self, op, binary):
        if len(op.inputs) == 1:
            self._emit(op, lambda x: x)
        elif len(op.inputs) == 2:
            self._emit(op, binary)
        else:
            self._emit(op, lambda *xs: functools.reduce(binary, xs))

    def visit_min(self, op, network):
        self._variadic(op, _extreme(torch.lt))

    def visit_max(self, op, network):
        self._variadic(op, _extreme(torch.gt))

    def visit_sum(self, op, network):
        self._variadic(op, torch.add)

    def visit_mean(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Mean.html"""
        count = len(op.inputs)
        self._emit(op, lambda *xs: functools.reduce(torch.add, xs) / count)

    def visit_clip(self, op, network):
        names = list(op.inputs) + ["", ""]
        bounds = [names[1], names[2]]
        if all(not n or n in self.known for n in bounds):
            low, high = (self._scalar(n) for n in bounds)
            if low is None and high is None:
                self._emit(op, lambda x: x, op.inputs[:1])
            else:
                self._emit(op, lambda x: torch.clamp(x, low, high), op.inputs[:1])
            return
        self._emit(op, lambda x, low=None, high=None: torch.clamp(x, low, high))


__all__ = ["MathOps"]
