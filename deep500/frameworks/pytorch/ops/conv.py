"""The conv family in PyTorch: Conv, ConvTranspose, DeformConv, CausalConvWithState and
Col2Im; window geometry from ``deep500.utils.onnx_interop.window``.
https://onnx.ai/onnx/operators/onnx__Conv.html
"""
from __future__ import annotations

import math

from deep500.frameworks.pytorch._torch_common import text, torch_pads
from deep500.frameworks.pytorch.ops._convolution import convolution
from deep500.frameworks.pytorch.ops._window import spatial_rank
from deep500.utils.errors import ShapeError, require
from deep500.utils.onnx_interop.window import conv_transpose_geometry

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

_CONV_TRANSPOSE = {1: torch.conv_transpose1d, 2: torch.conv_transpose2d,
                   3: torch.conv_transpose3d}


def col2im(columns, image_shape, block_shape, dilations, pads, strides):
    """ONNX Col2Im (https://onnx.ai/onnx/operators/onnx__Col2Im.html): the sum of the
    blocks (columns, as Im2Col lays them out) placed back in the image, N-D."""
    image = [int(n) for n in image_shape]
    block = [int(n) for n in block_shape]
    rank = len(image)
    dilations = list(dilations or [1] * rank)
    strides = list(strides or [1] * rank)
    pads = list(pads or [0] * (2 * rank))
    padded = [n + pads[i] + pads[rank + i] for i, n in enumerate(image)]
    counts = [(p - (d * (k - 1) + 1)) // s + 1
              for p, d, k, s in zip(padded, dilations, block, strides)]
    batch, rows, length = columns.shape
    kernel_size = math.prod(block)
    if rows % kernel_size or length != math.prod(counts):
        raise ShapeError(f"Col2Im: input of shape {list(columns.shape)} does not hold "
                         f"C·{kernel_size} rows and {math.prod(counts)} blocks for image "
                         f"{image}, block {block}, strides {strides}, pads {pads}, "
                         f"dilations {dilations}")
    channels = rows // kernel_size
    # Padded-image position of element k of block l, flat, laid out (k..., l...).
    flat = torch.zeros([1] * (2 * rank), dtype=torch.int64, device=columns.device)
    stride_of_axis = 1
    for axis in reversed(range(rank)):
        position = (torch.arange(block[axis], device=columns.device) * dilations[axis]
                    ).unsqueeze(1) + torch.arange(counts[axis], device=columns.device
                                                  ).unsqueeze(0) * strides[axis]
        view = [1] * (2 * rank)
        view[axis], view[rank + axis] = block[axis], counts[axis]
        flat = flat + position.reshape(view) * stride_of_axis
        stride_of_axis *= padded[axis]
    flat = flat.reshape(-1)
    values = columns.reshape(batch, channels, kernel_size * length)
    out = columns.new_zeros((batch, channels, math.prod(padded)))
    out = out.index_add(2, flat, values)
    out = out.reshape([batch, channels] + padded)
    crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(rank))
    return out[(slice(None), slice(None)) + crop]


def deform_conv(x, w, offset, b=None, mask=None, *, kernel, strides=None, pads=None,
                dilations=None, group=1, offset_group=1):
    """ONNX DeformConv (https://onnx.ai/onnx/operators/onnx__DeformConv.html), 2-D: each
    kernel tap of each output position reads X bilinearly (zeros outside, as GridSample
    with align_corners) at its regular position moved by ``offset`` ((dy, dx) per tap
    and offset group), scaled by ``mask``; then a grouped convolution."""
    if x.dim() != 4:
        raise ShapeError(f"DeformConv: only 2-D inputs are supported, X has shape "
                         f"{list(x.shape)}")
    n, channels, height, width = x.shape
    kh, kw = kernel
    strides = list(strides or [1, 1])
    pads = list(pads or [0, 0, 0, 0])
    dilations = list(dilations or [1, 1])
    oh, ow = offset.shape[-2:]
    groups_o = offset_group
    device, dtype = x.device, x.dtype
    offset = offset.reshape(n, groups_o, kh, kw, 2, oh, ow)

    def taps(size, count, stride, pad, dilation):
        """Regular positions: tap · dilation + output index · stride − pad."""
        tap = torch.arange(size, device=device, dtype=dtype) * dilation
        index = torch.arange(count, device=device, dtype=dtype) * stride - pad
        return tap, index

    tap_h, index_h = taps(kh, oh, strides[0], pads[0], dilations[0])
    tap_w, index_w = taps(kw, ow, strides[1], pads[1], dilations[1])
    rows = tap_h.view(kh, 1, 1, 1) + index_h.view(1, 1, oh, 1)
    cols = tap_w.view(1, kw, 1, 1) + index_w.view(1, 1, 1, ow)
    y = rows + offset[:, :, :, :, 0]                     # (n, groups, kh, kw, oh, ow)
    x_pos = cols + offset[:, :, :, :, 1]
    grid = torch.stack([x_pos / (width - 1) * 2 - 1, y / (height - 1) * 2 - 1], -1)
    grid = grid.reshape(n * groups_o, kh * kw * oh, ow, 2)
    per_group = channels // groups_o
    sampled = F.grid_sample(x.reshape(n * groups_o, per_group, height, width), grid,
                            "bilinear", "zeros", True)
    sampled = sampled.reshape(n, groups_o, per_group, kh, kw, oh, ow)
    if mask is not None:
        sampled = sampled * mask.reshape(n, groups_o, 1, kh, kw, oh, ow)
    out_channels = w.shape[0]
    columns = sampled.reshape(n, group, channels // group, kh, kw, oh, ow)
    weights = w.reshape(group, out_channels // group, channels // group, kh, kw)
    y = torch.einsum("ngcklij,gockl->ngoij", columns, weights).reshape(
        n, out_channels, oh, ow)
    return y if b is None else y + b.reshape(1, -1, 1, 1)


class ConvOps:
    """``visit_<op>`` of the conv family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_conv(self, op, network):
        self._emit(op, convolution(self, op, op.inputs[1]))

    def visit_convtranspose(self, op, network):
        a = op.attributes
        rank = spatial_rank(self, op, op.inputs[1])
        if rank not in _CONV_TRANSPOSE:
            raise self.node_error(op, f"{rank}-D transposed convolution is not supported "
                                  f"(1-D to 3-D are)")
        conv_t = _CONV_TRANSPOSE[rank]
        strides = list(a["strides"] or [1] * rank)
        dilations = list(a["dilations"] or [1] * rank)
        output_padding = list(a["output_padding"] or [0] * rank)
        group = a["group"]
        auto_pad = a.get("auto_pad") or "NOTSET"
        output_shape = a.get("output_shape")
        pads = list(a["pads"] or [0] * (2 * rank))
        if auto_pad == "VALID":
            pads = [0] * (2 * rank)
        if not output_shape and auto_pad in ("NOTSET", "VALID") and pads[:rank] == pads[rank:]:
            self._emit(op, lambda x, w, b=None: conv_t(
                x, w, b, strides, pads[:rank], output_padding, group, dilations))
            return

        def conv_transpose(x, w, b=None):
            # The full result, then cropped by the ONNX pads (which may be asymmetric
            # or follow from output_shape / auto_pad).
            geometry = conv_transpose_geometry(
                op.op_type, x.shape[2:], w.shape[2:], strides=strides, dilations=dilations,
                pads=a["pads"], auto_pad=auto_pad, output_padding=output_padding,
                output_shape=output_shape)
            y = conv_t(x, w, b, strides, 0, output_padding, group, dilations)
            begin, end = geometry.pads_begin, geometry.pads_end
            if min(begin + end) < 0:   # an output_shape beyond the full result: zeros
                y = F.pad(y, torch_pads([max(0, -p) for p in begin + end]))
                begin, end = [max(0, p) for p in begin], [max(0, p) for p in end]
            key = (slice(None), slice(None)) + tuple(
                slice(b_, b_ + o) for b_, o in zip(begin, geometry.output))
            return y[key]
        self._emit(op, conv_transpose)

    def visit_deformconv(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__DeformConv.html (2-D)."""
        a = op.attributes
        kernel = a.get("kernel_shape") or (self._shape(op.inputs[1]) or [None] * 4)[2:]
        if len(kernel) != 2 or None in kernel:
            rank = self._rank(op.inputs[1])
            if rank is not None and rank != 4:
                raise self.node_error(op, f"{rank - 2}-D DeformConv is not supported "
                                      f"(2-D is)")
            kernel = None
        options = dict(strides=a.get("strides"), pads=a.get("pads"),
                       dilations=a.get("dilations"), group=a.get("group") or 1,
                       offset_group=a.get("offset_group") or 1)

        def run(x, w, offset, b=None, mask=None):
            return deform_conv(x, w, offset, b, mask, kernel=kernel or list(w.shape[2:]),
                               **options)
        self._emit(op, run)

    def visit_causalconvwithstate(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__CausalConvWithState.html: a depthwise
        conv1d (weight (C, 1, k)) over P = concat(past_state (default zeros), input)
        along the length, SiLU after it with activation 'silu' or 'swish';
        present_state is the last k - 1 positions of P."""
        activation = text(op.attributes.get("activation"), "none")
        if activation not in ("none", "silu", "swish"):
            raise self.node_error(op, f"activation {activation!r} is not 'none', 'silu' "
                                  f"or 'swish'")

        def causal_conv(x, w, b=None, past=None):
            kept = w.shape[2] - 1
            if past is None:
                past = x.new_zeros((x.shape[0], x.shape[1], kept))
            padded = torch.cat([past.to(x.dtype), x], 2)
            y = F.conv1d(padded, w, b, groups=x.shape[1])
            return (y if activation == "none" else F.silu(y),
                    padded[:, :, padded.shape[2] - kept:])
        self._emit_outputs(op, causal_conv)

    def visit_col2im(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Col2Im.html"""
        a = op.attributes
        options = dict(dilations=a.get("dilations"), pads=a.get("pads"),
                       strides=a.get("strides"))
        image, block = self._ints(op.inputs[1]), self._ints(op.inputs[2])
        if image is not None and block is not None:
            self._emit(op, lambda x: col2im(x, image, block, **options), op.inputs[:1])
            return
        self._emit(op, lambda x, i, b: col2im(x, i.tolist(), b.tolist(), **options))


__all__ = ["ConvOps"]
