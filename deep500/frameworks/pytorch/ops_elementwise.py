"""PyTorchVisitor: elementwise arithmetic, unary functions, comparisons, variadic
Min/Max/Sum, Clip and Cast (https://onnx.ai/onnx/operators/).
"""
from __future__ import annotations

import functools

from deep500.frameworks.pytorch._torch_common import torch_dtype
from deep500.frameworks.pytorch.ops_tensor import (_NARROW_UNSIGNED, _compare, _ordered,
                                                   _unsigned_safe)
from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional


# PyTorch has no CPU kernels for uint16/32/64 arithmetic, comparisons or extrema:
# those types are computed as signed ones with the same results (ops_tensor's helpers).
def _wrapping(fn):
    """Add, Sub, Mul wrap modulo 2^bits for unsigned types, as ONNX's do: uint16/32 in
    int64 then narrowed (the conversion keeps the low bits), uint64 on its bits read as
    int64 (two's complement wraps the same)."""
    def wrapped(a, b):
        if a.dtype in _NARROW_UNSIGNED:
            return fn(a.long(), b.long()).to(a.dtype)
        if a.dtype == torch.uint64:
            return fn(a.view(torch.int64), b.view(torch.int64)).view(torch.uint64)
        return fn(a, b)
    return wrapped


def _extreme(before):
    """Min (``before`` = lt) or Max (gt) of two tensors; unsigned ones by their order
    (``_ordered``), others by torch.minimum/maximum (which propagate NaN as ONNX does)."""
    def extreme(a, b):
        if a.dtype in _NARROW_UNSIGNED or a.dtype == torch.uint64:
            return torch.where(before(_ordered(a), _ordered(b)), a, b)
        return (torch.minimum if before is torch.lt else torch.maximum)(a, b)
    return extreme

class ElementwiseOps:
    """``visit_<op>`` of the elementwise operators, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use
    (``_emit``, ``_known``, ``_ints``, ``_shape``, ``_rank``, ``_dtype``, ``_fail``)."""

    def _elementwise(self, op, fn) -> None:
        self._emit(op, fn)

    def visit_add(self, op, network):
        self._elementwise(op, _wrapping(torch.add))

    def visit_sub(self, op, network):
        self._elementwise(op, _wrapping(torch.sub))

    def visit_mul(self, op, network):
        self._elementwise(op, _wrapping(torch.mul))

    def visit_div(self, op, network):
        dtype = self._dtype(op.inputs[0])
        if dtype is not None and dtype.is_floating_point:
            self._elementwise(op, torch.div)
            return

        def divide(a, b):  # ONNX integer division truncates
            return torch.div(a, b) if a.is_floating_point() else torch.div(
                a, b, rounding_mode="trunc")
        self._elementwise(op, _unsigned_safe(divide))

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

    def _unary(self, op, fn):
        self._emit(op, fn)

    def visit_sqrt(self, op, network):
        self._unary(op, torch.sqrt)

    def visit_exp(self, op, network):
        self._unary(op, torch.exp)

    def visit_log(self, op, network):
        self._unary(op, torch.log)

    def visit_neg(self, op, network):
        self._unary(op, torch.neg)

    def visit_abs(self, op, network):
        self._unary(op, torch.abs)

    def visit_erf(self, op, network):
        self._unary(op, torch.erf)

    def visit_reciprocal(self, op, network):
        self._unary(op, torch.reciprocal)

    def visit_floor(self, op, network):
        self._unary(op, torch.floor)

    def visit_ceil(self, op, network):
        self._unary(op, torch.ceil)

    def visit_not(self, op, network):
        self._unary(op, torch.logical_not)

    def visit_relu(self, op, network):
        self._unary(op, torch.relu)

    def visit_sigmoid(self, op, network):
        self._unary(op, torch.sigmoid)

    def visit_tanh(self, op, network):
        self._unary(op, torch.tanh)

    def visit_leakyrelu(self, op, network):
        alpha = op.attributes["alpha"]
        self._unary(op, lambda x: F.leaky_relu(x, alpha))

    def visit_identity(self, op, network):
        self._unary(op, lambda x: x)

    def visit_equal(self, op, network):
        self._emit(op, torch.eq)

    def visit_less(self, op, network):
        self._emit(op, _compare(torch.lt))

    def visit_greater(self, op, network):
        self._emit(op, _compare(torch.gt))

    def visit_where(self, op, network):
        self._emit(op, torch.where)

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

    def visit_cast(self, op, network):
        # ONNX's saturation to 8-bit floats: ops_tensor.cast (x.to otherwise).
        from deep500.frameworks.pytorch.ops_tensor import cast
        dtype = torch_dtype(op.attributes["to"])
        saturate = bool(op.attributes.get("saturate", 1))
        if dtype == getattr(torch, "float8_e8m0fnu", None):
            self._emit(op, _cast_to_e8m0(saturate, op.attributes.get("round_mode") or "up"))
            return
        self._emit(op, lambda x: cast(x, dtype, saturate))


def _cast_to_e8m0(saturate: bool, round_mode: str):
    """Cast to FLOAT8E8M0 by ONNX's rules (``round_mode`` up, down or nearest; PyTorch's
    own conversion rounds to nearest only), through the shared conversion
    (``onnx_interop.cast``) on the host: the result has no gradient anyway."""
    from deep500.frameworks.pytorch.extension_dtypes import (array_from_tensor,
                                                             tensor_from_array)
    from deep500.utils.onnx_interop.cast import E8M0, convert

    def cast(x):
        converted = convert(array_from_tensor(x.detach().cpu()), E8M0, saturate, round_mode)
        return tensor_from_array(converted).to(x.device)
    return cast
