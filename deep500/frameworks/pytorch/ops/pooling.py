"""The pooling family in PyTorch: MaxPool, AveragePool, LpPool, their global forms and
MaxUnpool; window geometry from ``deep500.utils.onnx_interop.window``.
https://onnx.ai/onnx/operators/onnx__MaxPool.html
"""
from __future__ import annotations

import dataclasses
import math

from deep500.frameworks.pytorch._torch_common import text, torch_pads
from deep500.frameworks.pytorch.ops._window import onnx_pads
from deep500.utils.errors import ShapeError, require
from deep500.utils.onnx_interop.window import window_geometry

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _ceil_crop(op_type, spatial, pads, kernel, strides, dilations):
    """Pooling an explicitly padded input with ceil_mode lets a last window start in
    the end padding; ONNX (like PyTorch's own padding) drops such windows. The index
    that keeps the valid ones."""
    output = window_geometry(op_type, spatial, kernel, strides=strides,
                             dilations=dilations, pads=pads, ceil_mode=True).output
    return (slice(None), slice(None)) + tuple(slice(0, count) for count in output)


def _explicitly_padded(pool_padded, op_type, pads, pads_of, kernel, strides, dilations,
                       ceil_mode):
    """``fn(x)``: ``pool_padded(x, F.pad's pads)``, x padded by ONNX ``pads`` (or by
    ``pads_of`` its spatial shape) before pooling, windows that ceil_mode would start in
    the end padding dropped."""
    def pool(x):
        given = pads if pads_of is None else pads_of(x.shape[2:])
        y = pool_padded(x, torch_pads(given))
        if ceil_mode:
            y = y[_ceil_crop(op_type, x.shape[2:], given, kernel, strides, dilations)]
        return y
    return pool


def _torch_can_pad(pads, rank: int, kernel) -> bool:
    """Whether PyTorch's pooling kernels can pad as ONNX ``pads`` do: symmetric pads of
    at most half the kernel."""
    return pads is not None and pads[:rank] == pads[rank:] and all(
        2 * p <= k for p, k in zip(pads[:rank], kernel))


def _window_sums(x, geometry):
    """The sum of each pooling window of ``geometry`` (from ``window_geometry``) over
    ``x`` zero-padded, windows in the ceil_mode overhang included, then cropped to the
    output: a depthwise convolution with a kernel of ones, which dilates as the window
    does (PyTorch's average pooling does not)."""
    rank = x.dim() - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(rank)
    if conv is None:
        raise ShapeError(f"{rank}-D pooling is not supported (1-D to 3-D are)")
    padding = []
    for axis in reversed(range(rank)):
        padding += [geometry.pads_begin[axis],
                    geometry.pads_end[axis] + geometry.overhang[axis]]
    channels = x.shape[1]
    ones = torch.ones((channels, 1) + tuple(geometry.kernel), dtype=x.dtype,
                      device=x.device)
    total = conv(F.pad(x, padding), ones, None, geometry.strides, 0, geometry.dilations,
                 channels)
    return total[(slice(None), slice(None)) + tuple(slice(0, n) for n in geometry.output)]


def lp_pool(x, p: float, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """ONNX LpPool (https://onnx.ai/onnx/operators/onnx__LpPool.html): the p-norm of each
    window over the zero-padded input, (Σ|x|^p)^(1/p)."""
    geometry = window_geometry("LpPool", x.shape[2:], kernel, strides=strides,
                               dilations=dilations, pads=pads, auto_pad=auto_pad,
                               ceil_mode=ceil_mode)
    total = _window_sums(x.abs().pow(p) if p != 2 else x * x, geometry)
    return total.sqrt() if p == 2 else total.pow(1.0 / p)


def dilated_average_pool(x, kernel, strides, dilations, pads, auto_pad, ceil_mode,
                         count_include_pad: bool):
    """ONNX AveragePool with dilations: each window's sum over the padded input divided
    by its number of elements within the input, or with ``count_include_pad`` within the
    padded input (never the ceil_mode overhang beyond it)."""
    geometry = window_geometry("AveragePool", x.shape[2:], kernel, strides=strides,
                               dilations=dilations, pads=pads, auto_pad=auto_pad,
                               ceil_mode=ceil_mode)
    counted = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
    if count_include_pad:
        padding = []
        for axis in reversed(range(x.dim() - 2)):
            padding += [geometry.pads_begin[axis], geometry.pads_end[axis]]
        counted = F.pad(counted, padding, value=1.0)
        rank = x.dim() - 2
        unpadded = dataclasses.replace(geometry, pads_begin=[0] * rank, pads_end=[0] * rank)
        counts = _window_sums(counted, unpadded)
    else:
        counts = _window_sums(counted, geometry)
    return _window_sums(x, geometry) / counts


def _column_major(indices, spatial):
    """Plane indices (row-major over the spatial axes, as PyTorch gives them) in
    column-major order (ONNX's storage_order 1): (h, w) -> h + w·H."""
    coordinates, rest = [], indices
    for size in reversed(spatial):
        coordinates.append(rest % size)
        rest = rest // size
    result, stride = torch.zeros_like(indices), 1
    for coordinate, size in zip(reversed(coordinates), spatial):
        result = result + coordinate * stride
        stride *= size
    return result


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


class PoolingOps:
    """``visit_<op>`` of the pooling family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def _pool_setup(self, op, kernels: dict):
        """(rank, torch kernel, kernel, strides, dilations, pads, pads_of, ceil_mode) of
        a MaxPool or AveragePool node; pads as :func:`_window.onnx_pads` gives them."""
        a = op.attributes
        kernel = list(a["kernel_shape"])
        rank = len(kernel)
        if rank not in kernels:
            raise self.node_error(op, f"{rank}-D pooling is not supported (1-D to 3-D are)")
        strides = list(a["strides"] or [1] * rank)
        dilations = list(a.get("dilations") or [1] * rank)
        pads, pads_of = onnx_pads(self, op, rank, kernel, strides, dilations)
        return (rank, kernels[rank], kernel, strides, dilations, pads, pads_of,
                bool(a.get("ceil_mode")))

    def visit_maxpool(self, op, network):
        rank, pool, kernel, strides, dilations, pads, pads_of, ceil_mode = \
            self._pool_setup(op, _MAX_POOL)
        want_indices = len(op.outputs) > 1 and bool(op.outputs[1])
        fits = _torch_can_pad(pads, rank, kernel)
        if want_indices:
            if not fits:
                raise self.node_error(op, "the Indices output is supported only with "
                                      "symmetric pads of at most half the kernel")
            padding = pads[:rank]
            column_major = bool(op.attributes.get("storage_order"))

            def max_pool_indices(x):
                y, indices = pool(x, kernel, strides, padding, dilations, ceil_mode, True)
                if column_major:
                    indices = _column_major(indices, x.shape[2:])
                # PyTorch indexes each (n, c) plane; ONNX the whole tensor.
                plane = math.prod(x.shape[2:])
                offsets = torch.arange(x.shape[0] * x.shape[1], device=x.device) * plane
                return y, indices + offsets.view(x.shape[:2] + (1,) * rank)
            self._emit(op, max_pool_indices)
            return
        if fits:
            padding = pads[:rank]
            self._emit(op, lambda x: pool(x, kernel, strides, padding, dilations, ceil_mode))
            return

        def max_pool_padded(x, explicit):
            return pool(F.pad(x, explicit, value=-math.inf), kernel, strides, 0, dilations,
                        ceil_mode)
        self._emit(op, _explicitly_padded(max_pool_padded, op.op_type, pads, pads_of,
                                          kernel, strides, dilations, ceil_mode))

    def visit_averagepool(self, op, network):
        rank, pool, kernel, strides, dilations, pads, pads_of, ceil_mode = \
            self._pool_setup(op, _AVG_POOL)
        include_pad = bool(op.attributes.get("count_include_pad"))
        if any(d != 1 for d in dilations):
            options = dict(dilations=dilations, pads=op.attributes.get("pads"),
                           auto_pad=op.attributes.get("auto_pad") or "NOTSET",
                           ceil_mode=ceil_mode, count_include_pad=include_pad)
            self._emit(op, lambda x: dilated_average_pool(x, kernel, strides, **options))
            return
        fits = _torch_can_pad(pads, rank, kernel)
        if fits:
            padding = pads[:rank]
            self._emit(op, lambda x: pool(x, kernel, strides, padding, ceil_mode,
                                          include_pad))
            return

        def avg_pool_padded(x, explicit):
            y = pool(F.pad(x, explicit), kernel, strides, 0, ceil_mode, True)
            if include_pad:
                return y
            # Divide by the number of real (unpadded) elements in each window.
            ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
            return y / pool(F.pad(ones, explicit), kernel, strides, 0, ceil_mode, True)
        self._emit(op, _explicitly_padded(avg_pool_padded, op.op_type, pads, pads_of,
                                          kernel, strides, dilations, ceil_mode))

    def _global(self, op, reduce):
        """``reduce`` over the spatial axes (all but N and C), kept as ones."""
        rank = self._rank(op.inputs[0])
        if rank is not None:
            axes = tuple(range(2, rank))
            self._emit(op, lambda x: reduce(x, axes, keepdim=True))
        else:
            self._emit(op, lambda x: reduce(x, tuple(range(2, x.dim())), keepdim=True))

    def visit_globalaveragepool(self, op, network):
        self._global(op, torch.mean)

    def visit_globalmaxpool(self, op, network):
        self._global(op, torch.amax)

    def visit_maxunpool(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__MaxUnpool.html"""
        a = op.attributes
        options = dict(kernel=list(a["kernel_shape"]), strides=a.get("strides"),
                       pads=a.get("pads"))
        names = list(op.inputs) + [""]
        shape = self._ints(names[2]) if names[2] else None
        if names[2] and shape is None:
            self._emit(op, lambda x, i, s: max_unpool(x, i, s.tolist(), **options))
        else:
            self._emit(op, lambda x, i: max_unpool(x, i, shape, **options), op.inputs[:2])

    def visit_lppool(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__LpPool.html"""
        a = op.attributes
        p = a.get("p")
        p = 2 if p is None else p
        kernel = list(a["kernel_shape"])
        options = dict(strides=a.get("strides"), dilations=a.get("dilations"),
                       pads=a.get("pads"), auto_pad=text(a.get("auto_pad"), "NOTSET"),
                       ceil_mode=bool(a.get("ceil_mode")))
        self._emit(op, lambda x: lp_pool(x, p, kernel, **options))


__all__ = ["PoolingOps"]
