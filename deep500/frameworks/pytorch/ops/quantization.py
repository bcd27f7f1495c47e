"""The quantization family in PyTorch: QuantizeLinear, DequantizeLinear and
DynamicQuantizeLinear (per tensor, per axis or per block), MatMulInteger,
QLinearMatMul, ConvInteger and QLinearConv, computed in wide integer or float types and
saturated to the quantized type. https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html
"""
from __future__ import annotations

from deep500.frameworks.pytorch._torch_common import torch_dtype
from deep500.frameworks.pytorch.extension_dtypes import (carried_type, carrier_torch_dtype,
                                                         is_carried)
from deep500.frameworks.pytorch.ops._cast import cast, cast_to_carried, integer_range
from deep500.frameworks.pytorch.ops._convolution import convolution
from deep500.utils.errors import UnsupportedError, require
from deep500.utils.onnx_interop.cast import FLOAT4

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _broadcast_quantization(value, shape, axis, block):
    """A scale or zero point broadcastable to the quantized tensor: one value, one per
    index of ``axis``, or (``block`` > 0) one per block of ``block`` indices along it.
    https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html"""
    if value.numel() == 1:
        return value.reshape(())
    axis %= len(shape)
    if not block:
        dims = [1] * len(shape)
        dims[axis] = value.numel()
        return value.reshape(dims)
    return value.repeat_interleave(block, axis).narrow(axis, 0, shape[axis])


def _saturate_integer(values, dtype):
    """``values`` clamped to integer type ``dtype``'s range, in that type (a carried
    4- or 2-bit type in its carrier)."""
    if is_carried(dtype):
        low, high = integer_range(dtype)
        return values.clamp(low, high).to(carrier_torch_dtype(dtype))
    info = torch.iinfo(dtype)
    return values.clamp(info.min, info.max).to(dtype)


def _per_channel(values, rank: int, axis: int = 1):
    """A per-tensor (one value) or per-channel (along ``axis``) factor broadcastable to a
    tensor of ``rank``."""
    if values.numel() == 1:
        return values.reshape(())
    shape = [1] * rank
    shape[axis] = values.numel()
    return values.reshape(shape)


def _shifted(x, zero_point=None, axis: int = 1):
    """x - zero_point in float64, which holds every product sum of 8-bit integers that
    a convolution forms exactly (PyTorch has no integer convolution on the CPU)."""
    x = x.double()
    return x if zero_point is None else x - _per_channel(zero_point.double(), x.dim(), axis)


def _round_saturated(values, dtype):
    """Exact integer ``values`` (float64) as integer type ``dtype``, saturated."""
    return _saturate_integer(torch.round(values).long(), dtype)


class QuantizationOps:
    """``visit_<op>`` of the quantization family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def _quantized_type(self, op, name, given):
        """The element type of a quantized tensor: that of ``name`` (a zero point) if
        present, else the output_dtype attribute ``given``, else None (uint8): a torch
        dtype, or the ml_dtypes type of a carried one (int4, uint4, int2, uint2,
        float4)."""
        declared = self._element_type(name) if name else None
        if is_carried(declared):
            return declared
        if not name and given and carried_type(given) is not None:
            return carried_type(given)
        try:
            dtype = self._dtype(name) if name else None
            if dtype is None and given:
                dtype = torch_dtype(given)
        except UnsupportedError as error:
            raise self.node_error(op, f"the quantized type has no PyTorch tensor type "
                                  f"({error})") from None
        return dtype

    def visit_quantizelinear(self, op, network):
        """y = saturate(round(x / scale) + zero_point), rounding halves to even; scale
        and zero point per tensor, per axis or per block; float types by a saturating
        cast of x / scale.
        https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html"""
        a = op.attributes
        axis, block = a.get("axis", 1), a.get("block_size") or 0
        saturate = bool(a.get("saturate", 1))
        names = list(op.inputs) + [""]
        static = self._quantized_type(op, names[2], a.get("output_dtype"))
        carried = static if is_carried(static) else None
        precision = a.get("precision")
        precision = torch_dtype(precision) if precision else None

        def quantize(x, scale, zero_point=None):
            dtype = static or (zero_point.dtype if zero_point is not None else torch.uint8)
            scale = _broadcast_quantization(scale, x.shape, axis, block)
            if precision is not None:
                x, scale = x.to(precision), scale.to(precision)
            scaled = x / scale
            if carried == FLOAT4:
                return cast_to_carried(scaled, FLOAT4)
            if carried is None and dtype.is_floating_point:
                return cast(scaled, dtype, saturate)
            rounded = torch.round(scaled).long()
            if zero_point is not None:
                rounded = rounded + _broadcast_quantization(zero_point.long(), x.shape,
                                                            axis, block)
            return _saturate_integer(rounded, dtype)
        self._emit(op, quantize)

    def visit_dequantizelinear(self, op, network):
        """y = (x - zero_point)·scale in float32, then the scale's type (or output_dtype).
        https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html"""
        a = op.attributes
        axis, block = a.get("axis", 1), a.get("block_size") or 0
        given = a.get("output_dtype")
        output = torch_dtype(given) if given else None

        def dequantize(x, scale, zero_point=None):
            shifted = x.float()
            if zero_point is not None:
                shifted = shifted - _broadcast_quantization(zero_point.float(), x.shape,
                                                            axis, block)
            y = shifted * _broadcast_quantization(scale, x.shape, axis, block)
            return y.to(output or scale.dtype)
        self._emit(op, dequantize)

    def visit_dynamicquantizelinear(self, op, network):
        """uint8 quantization with the scale and zero point that map [min(x, 0),
        max(x, 0)] onto [0, 255].
        https://onnx.ai/onnx/operators/onnx__DynamicQuantizeLinear.html"""
        def dynamic_quantize(x):
            high = torch.clamp(x.max().float(), min=0)
            low = torch.clamp(x.min().float(), max=0)
            span = torch.where(high == low, torch.ones_like(high), high - low)
            scale = span / 255
            zero = torch.round(torch.clamp(-low / scale, 0, 255))
            y = torch.clamp(torch.round(x / scale) + zero, 0, 255).to(torch.uint8)
            return y, scale.to(x.dtype), zero.to(torch.uint8)
        self._emit(op, dynamic_quantize)

    def visit_matmulinteger(self, op, network):
        """(A - a_zero_point)·(B - b_zero_point) in int32; a 1-D a_zero_point is per row.
        https://onnx.ai/onnx/operators/onnx__MatMulInteger.html"""
        def matmul_integer(a, b, a_zero=None, b_zero=None):
            a, b = a.long(), b.long()
            if a_zero is not None:
                a = a - (a_zero.long().view(-1, 1) if a_zero.numel() > 1 else
                         a_zero.long().reshape(()))
            if b_zero is not None:
                b = b - b_zero.long()
            return torch.matmul(a, b).to(torch.int32)
        self._emit(op, matmul_integer)

    def visit_convinteger(self, op, network):
        """(X - x_zero_point) ⊛ (W - w_zero_point) in int32, w_zero_point per tensor or
        per output channel. https://onnx.ai/onnx/operators/onnx__ConvInteger.html"""
        conv = convolution(self, op, op.inputs[1])

        def conv_integer(x, w, x_zero=None, w_zero=None):
            return _round_saturated(conv(_shifted(x, x_zero), _shifted(w, w_zero, 0)),
                                    torch.int32)
        self._emit(op, conv_integer)

    def visit_qlinearconv(self, op, network):
        """The integer convolution of the shifted X and W plus the int32 bias B,
        rescaled by x_scale·w_scale/y_scale (w_scale per tensor or per output
        channel), rounded (halves to even), shifted by y_zero_point and saturated.
        https://onnx.ai/onnx/operators/onnx__QLinearConv.html"""
        conv = convolution(self, op, op.inputs[3])

        def qlinear_conv(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero=None,
                         b=None):
            y = conv(_shifted(x, x_zero), _shifted(w, w_zero, 0),
                     None if b is None else b.double())
            scale = (x_scale.double() * _per_channel(w_scale.double(), y.dim())
                     / y_scale.double())
            y = torch.round(y * scale)
            if y_zero is not None:
                y = y + y_zero.double()
            return _round_saturated(y, x.dtype if y_zero is None else y_zero.dtype)
        self._emit(op, qlinear_conv)

    def visit_qlinearmatmul(self, op, network):
        """Integer product of the shifted inputs, rescaled by a_scale·b_scale/y_scale,
        rounded (halves to even), shifted by y_zero_point and saturated.
        https://onnx.ai/onnx/operators/onnx__QLinearMatMul.html"""
        def qlinear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero=None):
            product = torch.matmul(a.long() - a_zero.long(), b.long() - b_zero.long())
            y = product.double() * (a_scale * b_scale / y_scale).double()
            if y_zero is not None:
                y = y + y_zero.double()
            dtype = a.dtype if y_zero is None else y_zero.dtype
            return _saturate_integer(torch.round(y), dtype)
        self._emit(op, qlinear_matmul)


__all__ = ["QuantizationOps"]
