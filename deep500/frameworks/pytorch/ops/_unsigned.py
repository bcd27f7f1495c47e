"""uint16, uint32 and uint64 arithmetic for the math and logic families.

PyTorch stores these types but has few CPU kernels for them (remainder, division,
shifts, comparisons, extrema, bitwise not): they are computed as signed types with the
same results. uint16/uint32 widen to int64, which holds every value exactly; uint64 is
read as the int64 with the same bits where two's complement gives the same bits back
(wrapping arithmetic, bitwise operators), or by an order-preserving flip of its top bit
(comparisons).
"""
from __future__ import annotations

from deep500.utils.errors import UnsupportedError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")

NARROW_UNSIGNED = (torch.uint16, torch.uint32)
INT64_MAX = (1 << 63) - 1


def is_unsigned(x) -> bool:
    """Whether ``x`` is a uint16/32/64 tensor (uint8 has PyTorch's kernels)."""
    return x.dtype in NARROW_UNSIGNED or x.dtype == torch.uint64


def by_value(fn):
    """``fn(a, b)`` for uint16/32 inputs computed in int64 and cast back; uint64 values
    must fit int64 (checked, since the bits would otherwise be read as negative)."""
    def wrapped(a, b):
        if a.dtype in NARROW_UNSIGNED:
            return fn(a.long(), b.long()).to(a.dtype)
        if a.dtype == torch.uint64:
            wide_a, wide_b = a.long(), b.long()
            if bool((wide_a < 0).any()) or bool((wide_b < 0).any()):
                raise UnsupportedError("The PyTorch executor computes this uint64 operator "
                                       "in int64: values of 2**63 and above are not "
                                       "supported; cast to a float type first")
            return fn(wide_a, wide_b).to(a.dtype)
        return fn(a, b)
    return wrapped


def wrapping(fn):
    """Add, Sub, Mul wrap modulo 2^bits for unsigned types, as ONNX's do: uint16/32 in
    int64 then narrowed (the conversion keeps the low bits), uint64 on its bits read as
    int64 (two's complement wraps the same)."""
    def wrapped(a, b):
        if a.dtype in NARROW_UNSIGNED:
            return fn(a.long(), b.long()).to(a.dtype)
        if a.dtype == torch.uint64:
            return fn(a.view(torch.int64), b.view(torch.int64)).view(torch.uint64)
        return fn(a, b)
    return wrapped


def ordered(x):
    """Unsigned tensors as signed ones with the same order: uint16/32 widen to int64;
    uint64 flips its top bit and is read as int64."""
    if x.dtype in NARROW_UNSIGNED:
        return x.long()
    if x.dtype == torch.uint64:
        return x.view(torch.int64) ^ (-1 << 63)
    return x


def compare(fn):
    """A comparison ``fn`` (torch.lt, ...) that also orders unsigned tensors."""
    return lambda a, b: fn(ordered(a), ordered(b))


__all__ = ["INT64_MAX", "NARROW_UNSIGNED", "by_value", "compare", "is_unsigned",
           "ordered", "wrapping"]
