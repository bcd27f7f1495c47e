"""ONNX's Cast rules in torch, for the tensor family (Cast, CastLike) and the
quantization family (QuantizeLinear to 8-bit floats).
https://onnx.ai/onnx/operators/onnx__Cast.html, https://onnx.ai/onnx/technical/float8.html
"""
from __future__ import annotations

import math

from deep500.frameworks.pytorch.extension_dtypes import array_from_tensor, tensor_from_array
from deep500.utils.errors import require
from deep500.utils.onnx_interop.cast import E8M0, convert

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


__all__ = ["FLOAT8", "cast", "cast_to_e8m0"]
