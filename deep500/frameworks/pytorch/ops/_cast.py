"""ONNX's Cast rules in torch, for the tensor family (Cast, CastLike) and the
quantization family (QuantizeLinear to 8-bit floats and to the carried types), as
``deep500/utils/onnx_interop/cast.py`` states them.
https://onnx.ai/onnx/operators/onnx__Cast.html, https://onnx.ai/onnx/technical/float8.html,
https://onnx.ai/onnx/technical/int4.html, https://onnx.ai/onnx/technical/float4.html
"""
from __future__ import annotations

import math

from deep500.frameworks.pytorch.extension_dtypes import (array_from_tensor,
                                                         carrier_torch_dtype,
                                                         tensor_from_array)
from deep500.utils.errors import require
from deep500.utils.onnx_interop.cast import E8M0, FLOAT4, convert

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")

# 8-bit float types that PyTorch has.
FLOAT8 = tuple(getattr(torch, name) for name in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
    if hasattr(torch, name))


def cast(x, dtype, saturate: bool = True):
    """ONNX Cast of ``x`` to ``dtype``. To 8-bit floats, values beyond the largest
    finite one become it (saturate, the default) or else NaN (the FN/FNUZ types) or
    ±inf (E5M2), after rounding to nearest even: PyTorch's own conversion does all of
    this but saturates E4M3FN always, so that case is written out."""
    if dtype not in FLOAT8 or not x.is_floating_point():
        return x.to(dtype)
    big = torch.finfo(dtype).max
    if saturate:
        return torch.clamp(x, -big, big).to(dtype)
    if dtype == torch.float8_e4m3fn:
        # beyond max + half its ulp (3 mantissa bits) rounds past the largest value
        limit = big + 2.0 ** (math.floor(math.log2(big)) - 4)
        return torch.where(x.abs() > limit, math.nan, x.float()).to(dtype)
    return x.to(dtype)


def cast_to_e8m0(saturate: bool, round_mode: str):
    """Cast to FLOAT8E8M0 by ONNX's rules (``round_mode`` up, down or nearest; PyTorch's
    own conversion rounds to nearest only), through the shared conversion
    (``onnx_interop.cast``) on the host: the result has no gradient anyway."""
    def to_e8m0(x):
        converted = convert(array_from_tensor(x.detach().cpu()), E8M0, saturate, round_mode)
        return tensor_from_array(converted).to(x.device)
    return to_e8m0


def integer_range(dtype) -> tuple[int, int]:
    """(lowest, largest) value of a carried 4- or 2-bit integer type."""
    bits = 4 if dtype.name.endswith("4") else 2
    if dtype.name.startswith("int"):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def cast_to_carried(x, dtype):
    """ONNX Cast of ``x`` to ``dtype``, a type PyTorch carries in a wider one (int4,
    uint4, int2, uint2 in int8/uint8; float4 E2M1 in float32): integers keep their low
    bits in two's complement (floats truncated toward zero first); float4 rounds to the
    nearest of its values (ties to an even mantissa), saturates to ±6 and makes NaN -0."""
    if dtype == FLOAT4:
        return _to_float4(x)
    low, high = integer_range(dtype)
    span = high - low + 1
    wide = x.to(torch.int64)    # floats truncate toward zero
    wrapped = torch.remainder(wide - low, span) + low
    return wrapped.to(carrier_torch_dtype(dtype))


def _to_float4(x):
    """E2M1 values are 0, 0.5, 1, 1.5 (step 0.5), 2, 3 (step 1), 4, 6 (step 2): the
    magnitude rounds to its binade's step (halves to even, as torch.round), which is
    round-to-nearest-even on the bits."""
    x = x.float()
    magnitude = x.abs().clamp(max=6.0)
    step = torch.where(magnitude < 2, 0.5, torch.where(magnitude < 4, 1.0, 2.0))
    rounded = torch.copysign(torch.round(magnitude / step) * step, x)
    return torch.where(torch.isnan(x), -0.0, rounded)


__all__ = ["FLOAT8", "cast", "cast_to_carried", "cast_to_e8m0", "integer_range"]
