"""PyTorchVisitor: dense linear algebra (MatMul, Gemm), convolution (Conv,
ConvTranspose) and pooling; window geometry from ``deep500.utils.onnx_interop.window``.
https://onnx.ai/onnx/operators/onnx__Conv.html
"""
from __future__ import annotations

import math

from deep500.frameworks.pytorch._torch_common import torch_pads
from deep500.utils.errors import require
from deep500.utils.onnx_interop.window import (conv_transpose_geometry, resolve_pads,
                                               window_geometry)

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

_CONV = {1: torch.conv1d, 2: torch.conv2d, 3: torch.conv3d}
_CONV_TRANSPOSE = {1: torch.conv_transpose1d, 2: torch.conv_transpose2d,
                   3: torch.conv_transpose3d}
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _ceil_crop(op_type, spatial, pads, kernel, strides, dilations):
    """Pooling an explicitly padded input with ceil_mode lets a last window start in
    the end padding; ONNX (like PyTorch's own padding) drops such windows. The index
    that keeps the valid ones."""
    output = window_geometry(op_type, spatial, kernel, strides=strides,
                             dilations=dilations, pads=pads, ceil_mode=True).output
    return (slice(None), slice(None)) + tuple(slice(0, count) for count in output)


class ConvolutionOps:
    """``visit_<op>`` of linear algebra, convolution and pooling, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use
    (``_emit``, ``_known``, ``_ints``, ``_shape``, ``_rank``, ``_dtype``, ``_fail``)."""

    def visit_matmul(self, op, network):
        self._emit(op, torch.matmul)

    def visit_gemm(self, op, network):
        a = op.attributes
        alpha, beta = a["alpha"], a["beta"]
        trans_a, trans_b = a.get("transA") or 0, a.get("transB") or 0
        c_shape = self._shape(op.inputs[2]) if len(op.inputs) > 2 else None
        has_c = len(op.inputs) > 2 and bool(op.inputs[2])
        if (not trans_a and trans_b and alpha == 1.0 and (not has_c or beta == 1.0)
                and (not has_c or (c_shape is not None and len(c_shape) == 1))):
            # The layout of nn.Linear: y = x·Wᵀ + b, one fused call.
            self._emit(op, F.linear)
            return

        def gemm(A, B, C=None):
            A = A.t() if trans_a else A
            B = B.t() if trans_b else B
            if C is None or beta == 0.0:
                product = torch.mm(A, B)
                return product if alpha == 1.0 else product * alpha
            return torch.addmm(C, A, B, beta=beta, alpha=alpha)
        self._emit(op, gemm)

    def _spatial_rank(self, op, kernel_name=None):
        """Spatial dimensions of a conv/pool node: from kernel_shape, W or X."""
        kernel = op.attributes.get("kernel_shape")
        if kernel:
            return len(kernel)
        for name, offset in ((kernel_name, 2), (op.inputs[0], 2)):
            rank = self._rank(name) if name else None
            if rank is not None:
                return rank - offset
        raise self._fail(op, "the number of spatial dimensions is unknown (no "
                             "kernel_shape, and neither W nor X has a known rank); give "
                             "kernel_shape or run ONNX shape inference on the model")

    def _pads(self, op, rank, kernel, strides, dilations):
        """(static ONNX pads [begin..., end...], or a function of the input's spatial
        shape giving them): :func:`deep500.utils.onnx_interop.window.resolve_pads`."""
        auto_pad = op.attributes.get("auto_pad") or "NOTSET"

        def pads_of(spatial):
            begin, end = resolve_pads(op.op_type, spatial, kernel, strides=strides,
                                      dilations=dilations, pads=op.attributes.get("pads"),
                                      auto_pad=auto_pad)
            return list(begin) + list(end)
        if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
            return pads_of([None] * rank), None
        x_shape = self._shape(op.inputs[0])
        if x_shape is not None:
            return pads_of(x_shape[2:]), None
        return None, pads_of

    def visit_conv(self, op, network):
        a = op.attributes
        rank = self._spatial_rank(op, op.inputs[1])
        if rank not in _CONV:
            raise self._fail(op, f"{rank}-D convolution is not supported (1-D to 3-D are)")
        conv = _CONV[rank]
        strides = tuple(a["strides"] or [1] * rank)
        dilations = tuple(a["dilations"] or [1] * rank)
        group = a["group"]
        kernel = a["kernel_shape"] or (self._shape(op.inputs[1]) or [None] * (rank + 2))[2:]
        pads, pads_of = self._pads(op, rank, kernel, strides, dilations)
        if pads_of is not None:
            if None in kernel:
                raise self._fail(op, "auto_pad SAME needs the kernel shape: give "
                                     "kernel_shape or a W of known shape")

            def conv_same(x, w, b=None):
                explicit = torch_pads(pads_of(x.shape[2:]))
                return conv(F.pad(x, explicit), w, b, strides, 0, dilations, group)
            self._emit(op, conv_same)
            return
        if pads[:rank] == pads[rank:]:
            padding = tuple(pads[:rank])
            self._emit(op, lambda x, w, b=None: conv(x, w, b, strides, padding, dilations,
                                                      group))
            return
        explicit = torch_pads(pads)
        self._emit(op, lambda x, w, b=None: conv(F.pad(x, explicit), w, b, strides, 0,
                                                 dilations, group))

    def visit_convtranspose(self, op, network):
        a = op.attributes
        rank = self._spatial_rank(op, op.inputs[1])
        if rank not in _CONV_TRANSPOSE:
            raise self._fail(op, f"{rank}-D transposed convolution is not supported")
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

    def _pool_setup(self, op):
        a = op.attributes
        kernel = list(a["kernel_shape"])
        rank = len(kernel)
        strides = list(a["strides"] or [1] * rank)
        dilations = list(a.get("dilations") or [1] * rank)
        pads, pads_of = self._pads(op, rank, kernel, strides, dilations)
        return rank, kernel, strides, dilations, pads, pads_of

    def visit_maxpool(self, op, network):
        rank, kernel, strides, dilations, pads, pads_of = self._pool_setup(op)
        if rank not in _MAX_POOL:
            raise self._fail(op, f"{rank}-D pooling is not supported")
        pool = _MAX_POOL[rank]
        ceil_mode = bool(op.attributes.get("ceil_mode"))
        want_indices = len(op.outputs) > 1 and bool(op.outputs[1])
        fits = pads is not None and pads[:rank] == pads[rank:] and all(
            2 * p <= k for p, k in zip(pads[:rank], kernel))
        if want_indices:
            if not fits or op.attributes.get("storage_order"):
                raise self._fail(op, "the Indices output is supported only with symmetric "
                                     "pads of at most half the kernel and storage_order 0")
            padding = pads[:rank]

            def max_pool_indices(x):
                y, indices = pool(x, kernel, strides, padding, dilations, ceil_mode, True)
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

        def max_pool_padded(x):
            onnx_pads = pads if pads_of is None else pads_of(x.shape[2:])
            y = pool(F.pad(x, torch_pads(onnx_pads), value=-math.inf), kernel, strides, 0,
                     dilations, ceil_mode)
            if ceil_mode:
                y = y[_ceil_crop(op.op_type, x.shape[2:], onnx_pads, kernel, strides,
                                   dilations)]
            return y
        self._emit(op, max_pool_padded)

    def visit_averagepool(self, op, network):
        rank, kernel, strides, dilations, pads, pads_of = self._pool_setup(op)
        if rank not in _AVG_POOL:
            raise self._fail(op, f"{rank}-D pooling is not supported")
        if any(d != 1 for d in dilations):
            raise self._fail(op, "dilated average pooling has no PyTorch kernel")
        pool = _AVG_POOL[rank]
        ceil_mode = bool(op.attributes.get("ceil_mode"))
        include_pad = bool(op.attributes.get("count_include_pad"))
        fits = pads is not None and pads[:rank] == pads[rank:] and all(
            2 * p <= k for p, k in zip(pads[:rank], kernel))
        if fits:
            padding = pads[:rank]
            self._emit(op, lambda x: pool(x, kernel, strides, padding, ceil_mode,
                                          include_pad))
            return

        def avg_pool_padded(x):
            onnx_pads = pads if pads_of is None else pads_of(x.shape[2:])
            explicit = torch_pads(onnx_pads)
            y = pool(F.pad(x, explicit), kernel, strides, 0, ceil_mode, True)
            if not include_pad:
                # Divide by the number of real (unpadded) elements in each window.
                ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype,
                                  device=x.device)
                y = y / pool(F.pad(ones, explicit), kernel, strides, 0, ceil_mode, True)
            if ceil_mode:
                y = y[_ceil_crop(op.op_type, x.shape[2:], onnx_pads, kernel, strides,
                                   dilations)]
            return y
        self._emit(op, avg_pool_padded)

    def visit_globalaveragepool(self, op, network):
        rank = self._rank(op.inputs[0])
        if rank is not None:
            axes = tuple(range(2, rank))
            self._emit(op, lambda x: x.mean(axes, keepdim=True))
        else:
            self._emit(op, lambda x: x.mean(tuple(range(2, x.dim())), keepdim=True))

    def visit_globalmaxpool(self, op, network):
        rank = self._rank(op.inputs[0])
        if rank is not None:
            axes = tuple(range(2, rank))
            self._emit(op, lambda x: x.amax(axes, keepdim=True))
        else:
            self._emit(op, lambda x: x.amax(tuple(range(2, x.dim())), keepdim=True))
