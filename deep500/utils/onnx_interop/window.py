"""ONNX window geometry, written once for every executor and for the cost models.

Where the windows of a convolution or pooling lie, following the ONNX operator spec:

* output extent along a spatial axis (explicit ``pads``, ``dilations``, ``strides``):
  ``floor((in + pad_begin + pad_end - ((kernel - 1)·dilation + 1)) / stride) + 1``
  (https://onnx.ai/onnx/operators/onnx__Conv.html,
  https://onnx.ai/onnx/operators/onnx__MaxPool.html);
* ``ceil_mode=1`` rounds up instead, except that the last window must start inside the
  input or its begin padding, never in the end padding
  (https://onnx.ai/onnx/operators/onnx__AveragePool.html, "the last pooling window
  starts ... within the input or left padding");
* ``auto_pad=SAME_UPPER``/``SAME_LOWER``: ``out = ceil(in / stride)``, the total padding
  ``max(0, (out - 1)·stride + (kernel - 1)·dilation + 1 - in)`` split in halves, the odd
  element at the end (UPPER) or the beginning (LOWER); ``VALID``: no padding;
  ``NOTSET``: the explicit ``pads`` ([x1_begin, x2_begin, ..., x1_end, x2_end, ...]);
* transposed convolution (https://onnx.ai/onnx/operators/onnx__ConvTranspose.html):
  ``out = stride·(in - 1) + output_padding + (kernel - 1)·dilation + 1 - pad_begin -
  pad_end``; with ``output_shape`` (or ``auto_pad`` SAME, which asks for
  ``in·stride``) the pads follow from it, the larger half at the end for SAME_UPPER and
  at the beginning otherwise.

Frameworks call these functions rather than re-deriving the rules; nothing here knows
a framework.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from deep500.utils.errors import ShapeError, UnsupportedError

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class WindowGeometry:
    """Where the windows of a convolution or pooling lie along each spatial axis.

    The input is padded by ``pads_begin``/``pads_end`` (explicit or from auto_pad) and,
    in ceil_mode, by ``overhang`` more elements at the end that the last window reaches
    past the padding; window ``o`` along axis ``i`` reads padded positions
    ``o·strides[i] + k·dilations[i]`` for ``k < kernel[i]``.
    """
    input: tuple
    kernel: tuple
    strides: tuple
    dilations: tuple
    pads_begin: tuple
    pads_end: tuple
    overhang: tuple
    output: tuple

    @property
    def extents(self) -> tuple:
        """Spatial extent of one (dilated) window: (kernel - 1)·dilation + 1."""
        return window_extents(self.kernel, self.dilations)

    @property
    def pads(self) -> list:
        """The padding in ONNX's layout [begin..., end...] (ceil_mode overhang excluded)."""
        return list(self.pads_begin) + list(self.pads_end)

    @property
    def padded(self) -> tuple:
        """Spatial extents of the input padded for all windows."""
        return tuple(b + n + e + o for b, n, e, o in
                     zip(self.pads_begin, self.input, self.pads_end, self.overhang))

    @property
    def kernel_size(self) -> int:
        return int(np.prod(self.kernel, dtype=np.int64))

    def kernel_slices(self):
        """(k, slices) per kernel position k (row-major): ``padded[..., *slices]`` is the
        element that position k of every window reads, shaped like the output."""
        for k, position in enumerate(itertools.product(*(range(n) for n in self.kernel))):
            yield k, tuple(slice(p * d, p * d + (o - 1) * s + 1, s) for p, d, o, s in
                           zip(position, self.dilations, self.output, self.strides))


def window_extents(kernel, dilations) -> tuple:
    """Extent of a dilated window per axis: (kernel - 1)·dilation + 1."""
    return tuple((int(k) - 1) * int(d) + 1 for k, d in zip(kernel, dilations))


def spatial_ints(op: str, name: str, value, rank: int, default: int, minimum: int
                 ) -> tuple:
    """An ONNX per-axis attribute (``strides``, ``dilations``, ``kernel_shape``,
    ``pads`` with rank = 2·axes) as a tuple, ``default`` per axis when absent (None)."""
    if value is None:
        return (default,) * rank
    value = tuple(int(v) for v in value)
    if len(value) != rank:
        raise ShapeError(f"{op}: attribute {name}={list(value)} must have {rank} values, one "
                         f"per spatial axis of the input")
    if any(v < minimum for v in value):
        raise ShapeError(f"{op}: attribute {name}={list(value)} must be >= {minimum}")
    return value


def _window_attributes(op: str, input_spatial, kernel, strides, dilations) -> tuple:
    """(input extents, kernel, strides, dilations) as tuples, one entry per spatial axis,
    strides and dilations 1 where absent."""
    input_spatial = tuple(int(n) for n in input_spatial)
    rank = len(input_spatial)
    return (input_spatial, spatial_ints(op, "kernel_shape", kernel, rank, 1, 1),
            spatial_ints(op, "strides", strides, rank, 1, 1),
            spatial_ints(op, "dilations", dilations, rank, 1, 1))


def _check_auto_pad(op: str, auto_pad) -> str:
    auto_pad = auto_pad or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise UnsupportedError(f"{op}: auto_pad={auto_pad!r} is not one of {AUTO_PADS}")
    return auto_pad


def same_pads(input_spatial, kernel, strides, dilations, auto_pad: str = "SAME_UPPER"
              ) -> tuple[tuple, tuple]:
    """(begin, end) padding of ``auto_pad`` SAME_UPPER or SAME_LOWER: the output is
    ceil(input / stride) and the odd element of the total padding goes at the end
    (UPPER) or the beginning (LOWER). https://onnx.ai/onnx/operators/onnx__Conv.html"""
    begin, end = [], []
    for n, k, s, d in zip(input_spatial, kernel, strides, dilations):
        n, s = int(n), int(s)
        output = -(-n // s)
        total = max(0, (output - 1) * s + (int(k) - 1) * int(d) + 1 - n)
        small, large = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
    return tuple(begin), tuple(end)


def resolve_pads(op: str, input_spatial, kernel, *, strides=None, dilations=None,
                 pads=None, auto_pad: str = "NOTSET") -> tuple[tuple, tuple]:
    """(begin, end) padding per spatial axis for any ``auto_pad``. ``input_spatial`` may
    hold None (unknown extents) except for SAME_UPPER/SAME_LOWER, which depend on it."""
    rank = len(kernel)
    auto_pad = _check_auto_pad(op, auto_pad)
    strides = spatial_ints(op, "strides", strides, rank, 1, 1)
    dilations = spatial_ints(op, "dilations", dilations, rank, 1, 1)
    explicit = spatial_ints(op, "pads", pads, 2 * rank, 0, 0)
    if auto_pad != "NOTSET" and any(explicit):
        raise ShapeError(f"{op}: pads={list(explicit)} cannot be combined with "
                         f"auto_pad={auto_pad}")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if any(n is None for n in input_spatial):
            raise ShapeError(f"{op}: auto_pad={auto_pad} needs the input's spatial extents, "
                             f"which are unknown ({list(input_spatial)})")
        return same_pads(input_spatial, kernel, strides, dilations, auto_pad)
    return explicit[:rank], explicit[rank:]


def window_geometry(op: str, input_spatial, kernel, *, strides=None, dilations=None,
                    pads=None, auto_pad: str = "NOTSET", ceil_mode: bool = False
                    ) -> WindowGeometry:
    """Window geometry of a convolution or pooling with ONNX attributes (None meaning
    "not present"); ``op`` names the operator in errors.
    https://onnx.ai/onnx/operators/onnx__Conv.html,
    https://onnx.ai/onnx/operators/onnx__MaxPool.html"""
    input_spatial, kernel, strides, dilations = _window_attributes(
        op, input_spatial, kernel, strides, dilations)
    begin, end = resolve_pads(op, input_spatial, kernel, strides=strides,
                              dilations=dilations, pads=pads, auto_pad=auto_pad)
    extents = window_extents(kernel, dilations)
    if (auto_pad or "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
        output = tuple(-(-n // s) for n, s in zip(input_spatial, strides))
    else:
        output = []
        for n, b, e, x, s in zip(input_spatial, begin, end, extents, strides):
            span = n + b + e - x
            if span < 0:
                raise ShapeError(f"{op}: the window (kernel {list(kernel)}, dilations "
                                 f"{list(dilations)}) is larger than the padded input "
                                 f"{list(input_spatial)}")
            count = (-(-span // s) if ceil_mode else span // s) + 1
            # In ceil_mode, a last window that would start in the end padding is dropped.
            if ceil_mode and (count - 1) * s >= n + b:
                count -= 1
            output.append(count)
        output = tuple(output)
    overhang = tuple(max(0, (o - 1) * s + x - (b + n + e)) for o, s, x, b, n, e in
                     zip(output, strides, extents, begin, input_spatial, end))
    return WindowGeometry(input_spatial, kernel, strides, dilations, tuple(begin),
                          tuple(end), overhang, output)


def window_counts(geometry: WindowGeometry, include_pad: bool) -> np.ndarray:
    """Number of elements each window averages over (AveragePool), shaped like the
    output: input elements only, or with ``include_pad`` (``count_include_pad=1``) also
    the padding (explicit or from auto_pad) but never the ceil_mode overhang past it.
    Windows are boxes, so the count is a product of per-axis counts.
    https://onnx.ai/onnx/operators/onnx__AveragePool.html"""
    counts = np.ones((), dtype=np.int64)
    for axis in range(len(geometry.input)):
        begin, size = geometry.pads_begin[axis], geometry.input[axis]
        end, overhang = geometry.pads_end[axis], geometry.overhang[axis]
        if include_pad:
            covered = np.r_[np.ones(begin + size + end, np.int64), np.zeros(overhang, np.int64)]
        else:
            covered = np.r_[np.zeros(begin, np.int64), np.ones(size, np.int64),
                            np.zeros(end + overhang, np.int64)]
        stride, dilation = geometry.strides[axis], geometry.dilations[axis]
        starts = np.arange(geometry.output[axis]) * stride
        offsets = np.arange(geometry.kernel[axis]) * dilation
        per_axis = covered[starts[:, None] + offsets[None, :]].sum(axis=1)
        counts = np.multiply.outer(counts, per_axis)
    return counts


@dataclass(frozen=True)
class TransposedGeometry:
    """Geometry of ConvTranspose along each spatial axis: the uncropped result
    ``full = stride·(in - 1) + output_padding + (kernel - 1)·dilation + 1`` is cropped by
    ``pads_begin``/``pads_end`` to ``output`` (a negative pad, from an ``output_shape``
    larger than ``full``, extends it with zeros)."""
    input: tuple
    kernel: tuple
    strides: tuple
    dilations: tuple
    output_padding: tuple
    full: tuple
    pads_begin: tuple
    pads_end: tuple
    output: tuple


def conv_transpose_geometry(op: str, input_spatial, kernel, *, strides=None,
                            dilations=None, pads=None, auto_pad: str = "NOTSET",
                            output_padding=None, output_shape=None) -> TransposedGeometry:
    """ConvTranspose output geometry from its ONNX attributes.
    https://onnx.ai/onnx/operators/onnx__ConvTranspose.html"""
    input_spatial, kernel, strides, dilations = _window_attributes(
        op, input_spatial, kernel, strides, dilations)
    rank = len(input_spatial)
    output_padding = spatial_ints(op, "output_padding", output_padding, rank, 0, 0)
    auto_pad = _check_auto_pad(op, auto_pad)
    explicit = spatial_ints(op, "pads", pads, 2 * rank, 0, 0)
    full = tuple(s * (n - 1) + p + x for n, s, p, x in
                 zip(input_spatial, strides, output_padding,
                     window_extents(kernel, dilations)))
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape:
            target = tuple(int(v) for v in output_shape)[-rank:]
            if len(target) != rank:
                raise ShapeError(f"{op}: output_shape={list(output_shape)} must give the "
                                 f"{rank} spatial extents of the output")
        else:
            target = tuple(n * s for n, s in zip(input_spatial, strides))
        # An output_shape beyond the full output makes the total padding negative:
        # the output then extends past the full result with zeros.
        totals = [f - t for f, t in zip(full, target)]
        upper = auto_pad == "SAME_UPPER"
        begin = tuple(t // 2 if upper else t - t // 2 for t in totals)
        end = tuple(t - b for t, b in zip(totals, begin))
    elif auto_pad == "VALID":
        begin = end = (0,) * rank
    else:
        begin, end = explicit[:rank], explicit[rank:]
    output = tuple(f - b - e for f, b, e in zip(full, begin, end))
    if any(o < 1 for o in output):
        raise ShapeError(f"{op}: pads {list(begin) + list(end)} leave no output of the "
                         f"transposed convolution (uncropped output {list(full)})")
    return TransposedGeometry(input_spatial, kernel, strides, dilations, output_padding,
                              full, begin, end, output)
