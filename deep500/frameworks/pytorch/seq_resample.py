"""ONNX resampling and window operators in ``torch`` operations (differentiable by
autograd): Resize, LpPool, Col2Im and CenterCropPad.

Resize reads its interpolation plans (per resized axis, an index for nearest or an
(output, input) weight matrix for linear and cubic, with every coordinate mode,
exclude_outside, antialias and tf_crop_and_resize extrapolation) from
``deep500/utils/onnx_interop/resize.py``, where ONNX's Resize semantics are written once
for every executor; they depend only on the input's shape and the constant
roi/scales/sizes, and are applied here with ``index_select`` and ``tensordot``. https://onnx.ai/onnx/operators/onnx__Resize.html
"""
from __future__ import annotations

import math

import numpy as np

from deep500.utils.errors import ShapeError, require
from deep500.utils.onnx_interop.resize import RESIZE_DEFAULTS, plans_from
from deep500.utils.onnx_interop.window import window_geometry

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional


class ResizePlans:
    """The plans of one Resize (or Upsample) node, cached per input shape and constant
    inputs."""

    def __init__(self, attributes: dict, op_type: str = "Resize"):
        self.op_type = op_type
        self.attributes = {k: v for k, v in attributes.items()
                           if v is not None and (k in RESIZE_DEFAULTS or k == "mode")}
        self.extrapolation = float(self.attributes.get(
            "extrapolation_value", RESIZE_DEFAULTS["extrapolation_value"]))
        self._cache: dict = {}

    def plans(self, shape, inputs):
        """The plans for X of ``shape`` and the (roi, scales, sizes) ``inputs`` (arrays,
        tensors or None), as ``onnx_interop.resize.plans_from`` computes them."""
        arrays = [None if v is None else
                  np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v)
                  for v in inputs]
        key = (tuple(shape),) + tuple(None if a is None else
                                      (a.dtype.str, tuple(a.ravel().tolist()))
                                      for a in arrays)
        plans = self._cache.get(key)
        if plans is None:
            plans = plans_from(self.op_type, self.attributes, tuple(shape), arrays)
            if len(self._cache) < 64:
                self._cache[key] = plans
        return plans


def apply_resize(x, plans, extrapolation_value: float):
    """Y from X by ``plans`` (see ``onnx_interop.resize.AxisPlan``)."""
    integer = not x.is_floating_point()
    y = x.double() if integer else x
    outside = None
    for plan in plans:
        if plan.index is not None:
            index = torch.as_tensor(plan.index, dtype=torch.int64, device=x.device)
            y = y.index_select(plan.axis, index)
        else:
            weights = torch.as_tensor(plan.weights, dtype=y.dtype, device=x.device)
            y = torch.movedim(torch.tensordot(weights, y, dims=([1], [plan.axis])), 0,
                              plan.axis)
        if plan.outside is not None:
            view = [1] * x.dim()
            view[plan.axis] = len(plan.outside)
            mask = torch.as_tensor(plan.outside, device=x.device).reshape(view)
            outside = mask if outside is None else outside | mask
    if integer:
        info = torch.iinfo(x.dtype) if x.dtype != torch.bool else None
        y = torch.round(y)
        y = (y != 0) if info is None else torch.clamp(y, info.min, info.max).to(x.dtype)
    if outside is not None:
        y = torch.where(outside, torch.full((), extrapolation_value, dtype=y.dtype,
                                            device=y.device), y)
    return y


def lp_pool(x, p: float, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """ONNX LpPool (https://onnx.ai/onnx/operators/onnx__LpPool.html): the p-norm of each
    window over the zero-padded input, (Σ|x|^p)^(1/p), as a depthwise convolution with a
    kernel of ones."""
    rank = x.dim() - 2
    geometry = window_geometry("LpPool", x.shape[2:], kernel, strides=strides,
                               dilations=dilations, pads=pads, auto_pad=auto_pad,
                               ceil_mode=ceil_mode)
    torch_pads = []
    for axis in reversed(range(rank)):
        torch_pads += [geometry.pads_begin[axis],
                       geometry.pads_end[axis] + geometry.overhang[axis]]
    powered = x.abs().pow(p) if p != 2 else x * x
    powered = F.pad(powered, torch_pads)
    channels = x.shape[1]
    ones = torch.ones((channels, 1) + tuple(geometry.kernel), dtype=x.dtype,
                      device=x.device)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(rank)
    if conv is None:
        raise ShapeError(f"LpPool: {rank}-D pooling is not supported (1-D to 3-D are)")
    total = conv(powered, ones, None, geometry.strides, 0, geometry.dilations, channels)
    total = total[(slice(None), slice(None)) + tuple(slice(0, n) for n in geometry.output)]
    return total.sqrt() if p == 2 else total.pow(1.0 / p)


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


def center_crop_pad(x, shape, axes):
    """ONNX CenterCropPad (https://onnx.ai/onnx/operators/onnx__CenterCropPad.html):
    each axis in ``axes`` cropped (start (n - target)//2) or zero-padded (before:
    (target - n)//2) to ``shape``."""
    rank = x.dim()
    axes = list(range(rank)) if not axes else [a % rank for a in axes]
    if len(shape) != len(axes):
        raise ShapeError(f"CenterCropPad: shape has {len(shape)} values; it needs one per "
                         f"axis in {axes}")
    for axis, target in zip(axes, shape):
        length = x.shape[axis]
        if target < length:
            start = (length - target) // 2
            x = x.narrow(axis, start, target)
        elif target > length:
            before = (target - length) // 2
            pad = [0, 0] * (rank - axis - 1) + [before, target - length - before]
            x = F.pad(x, pad)
    return x


def _roi_axis(start, size, pooled: int, grid: int, length: int):
    """Sample positions of one RoiAlign axis: (low, high, weight of low, weight of high)
    per sample (pooled · grid samples); samples outside [-1, length] weigh nothing, as
    onnx's reference and onnxruntime define them."""
    device, dtype = start.device, start.dtype
    bin_size = size / pooled
    offsets = (torch.arange(pooled, device=device, dtype=dtype).unsqueeze(1) * bin_size
               + (torch.arange(grid, device=device, dtype=dtype).unsqueeze(0) + 0.5)
               * bin_size / grid)
    position = (start + offsets).reshape(-1)
    outside = (position < -1) | (position > length)
    position = position.clamp(min=0)
    low = position.detach().floor().long()
    edge = low >= length - 1
    low = torch.where(edge, torch.full_like(low, length - 1), low)
    high = torch.where(edge, low, low + 1)
    position = torch.where(edge, low.to(dtype), position)
    upper = position - low.to(dtype)
    lower = 1 - upper
    zero = torch.zeros_like(upper)
    return low, high, torch.where(outside, zero, lower), torch.where(outside, zero, upper)


def roi_align(x, rois, batch_indices, *, mode="avg", output_height=1, output_width=1,
              sampling_ratio=0, spatial_scale=1.0, half_pixel=True):
    """ONNX RoiAlign (https://onnx.ai/onnx/operators/onnx__RoiAlign.html): each region
    (x1, y1, x2, y2) of ``rois`` (scaled by ``spatial_scale``, shifted by half a pixel
    in 'half_pixel' mode, at least 1 pixel wide otherwise) pooled to output_height ×
    output_width bins from a grid of bilinear samples per bin (sampling_ratio, or
    ceil(bin size)); 'avg' averages the samples, 'max' takes the largest weighted corner
    value of any sample, as onnxruntime."""
    height, width = x.shape[2], x.shape[3]
    rois = rois.to(x.dtype)
    offset = 0.5 if half_pixel else 0.0
    results = []
    for r, b in enumerate(batch_indices.tolist()):
        start_w, start_h, end_w, end_h = (rois[r] * spatial_scale - offset).unbind()
        roi_w, roi_h = end_w - start_w, end_h - start_h
        if not half_pixel:
            roi_w, roi_h = roi_w.clamp(min=1.0), roi_h.clamp(min=1.0)
        grid_h = sampling_ratio or max(int(math.ceil(roi_h.item() / output_height)), 0)
        grid_w = sampling_ratio or max(int(math.ceil(roi_w.item() / output_width)), 0)
        count = max(grid_h * grid_w, 1)
        if grid_h == 0 or grid_w == 0:   # an empty region: no samples, zeros
            results.append(x.new_zeros((x.shape[1], output_height, output_width)))
            continue
        y_low, y_high, hy, ly = _roi_axis(start_h, roi_h, output_height, grid_h, height)
        x_low, x_high, hx, lx = _roi_axis(start_w, roi_w, output_width, grid_w, width)
        image = x[int(b)]
        if mode == "avg":
            wy = image.new_zeros((len(y_low), height)).scatter_add(
                1, y_low.unsqueeze(1), hy.unsqueeze(1)).scatter_add(
                1, y_high.unsqueeze(1), ly.unsqueeze(1))
            wx = image.new_zeros((len(x_low), width)).scatter_add(
                1, x_low.unsqueeze(1), hx.unsqueeze(1)).scatter_add(
                1, x_high.unsqueeze(1), lx.unsqueeze(1))
            samples = torch.einsum("yh,chw,xw->cyx", wy, image, wx)
            pooled = samples.reshape(-1, output_height, grid_h, output_width, grid_w)
            results.append(pooled.sum((2, 4)) / count)
        else:
            rows_low, rows_high = image[:, y_low], image[:, y_high]
            corners = torch.stack([
                hy[:, None] * hx[None, :] * rows_low[:, :, x_low],
                hy[:, None] * lx[None, :] * rows_low[:, :, x_high],
                ly[:, None] * hx[None, :] * rows_high[:, :, x_low],
                ly[:, None] * lx[None, :] * rows_high[:, :, x_high]]).amax(0)
            pooled = corners.reshape(-1, output_height, grid_h, output_width, grid_w)
            results.append(pooled.amax(4).amax(2))
    if not results:
        return x.new_zeros((0, x.shape[1], output_height, output_width))
    return torch.stack(results)


def max_unpool(x, indices, output_shape=None, *, kernel, strides=None, pads=None):
    """ONNX MaxUnpool (https://onnx.ai/onnx/operators/onnx__MaxUnpool.html): zeros of
    the pooled input's shape ((n - 1)·stride + kernel − pads per axis) with X placed at
    ``indices`` (flat over the whole tensor, as MaxPool's Indices); a larger
    ``output_shape`` extends each axis with zeros at the end, as onnx's reference."""
    rank = x.dim() - 2
    strides = list(strides or [1] * rank)
    pads = list(pads or [0] * (2 * rank))
    shape = list(x.shape[:2]) + [(n - 1) * s + k - pads[i] - pads[rank + i]
                                 for i, (n, s, k) in enumerate(zip(x.shape[2:], strides,
                                                                   kernel))]
    flat = x.new_zeros(math.prod(shape))
    y = flat.scatter(0, indices.reshape(-1).long(), x.reshape(-1)).reshape(shape)
    if output_shape is None:
        return y
    target = [int(n) for n in output_shape]
    if len(target) != len(shape) or any(t < n for t, n in zip(target, shape)):
        raise ShapeError(f"MaxUnpool: output_shape {target} must have rank {len(shape)} "
                         f"and be at least the unpooled shape {shape} on every axis")
    extra = []
    for t, n in reversed(list(zip(target, shape))):
        extra += [0, t - n]
    return F.pad(y, extra)


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
