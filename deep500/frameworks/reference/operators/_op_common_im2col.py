"""Sliding-window geometry shared by convolution and pooling (output extents, auto_pad,
ceil_mode), padding, and im2col/col2im over any number of spatial axes.
https://onnx.ai/onnx/operators/onnx__Conv.html"""
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


def _ints(op: str, name: str, value, rank: int, default: int, minimum: int) -> tuple:
    if value is None:
        return (default,) * rank
    value = tuple(int(v) for v in value)
    if len(value) != rank:
        raise ShapeError(f"{op}: attribute {name}={list(value)} must have {rank} values, one "
                         f"per spatial axis of the input")
    if any(v < minimum for v in value):
        raise ShapeError(f"{op}: attribute {name}={list(value)} must be >= {minimum}")
    return value


def window_geometry(op: str, input_spatial, kernel, *, strides=None, dilations=None,
                    pads=None, auto_pad: str = "NOTSET", ceil_mode: bool = False
                    ) -> WindowGeometry:
    """Window geometry for ONNX attributes (None meaning "not present")."""
    input_spatial = tuple(int(n) for n in input_spatial)
    rank = len(input_spatial)
    kernel = _ints(op, "kernel_shape", kernel, rank, 1, 1)
    strides = _ints(op, "strides", strides, rank, 1, 1)
    dilations = _ints(op, "dilations", dilations, rank, 1, 1)
    if auto_pad not in AUTO_PADS:
        raise UnsupportedError(f"{op}: auto_pad={auto_pad!r} is not one of {AUTO_PADS}")
    explicit = _ints(op, "pads", pads, 2 * rank, 0, 0)
    if auto_pad != "NOTSET" and any(explicit):
        raise ShapeError(f"{op}: pads={list(explicit)} cannot be combined with "
                         f"auto_pad={auto_pad}")
    extents = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilations))

    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output = tuple(-(-n // s) for n, s in zip(input_spatial, strides))
        totals = [max(0, (o - 1) * s + e - n)
                  for o, s, e, n in zip(output, strides, extents, input_spatial)]
        # An odd total puts the extra element at the end (UPPER) or beginning (LOWER).
        small = [t // 2 for t in totals]
        large = [t - t // 2 for t in totals]
        begin, end = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    else:
        begin, end = explicit[:rank], explicit[rank:]
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
    overhang = tuple(max(0, (o - 1) * s + x - (b + n + e)) for o, s, x, b, n, e in
                     zip(output, strides, extents, begin, input_spatial, end))
    return WindowGeometry(input_spatial, kernel, strides, dilations, tuple(begin),
                          tuple(end), overhang, tuple(output))


def pad_spatial(x: np.ndarray, geometry: WindowGeometry, value=0) -> np.ndarray:
    """``x`` (N, C, *spatial) padded to (N, C, *geometry.padded) with ``value``."""
    if not any(geometry.pads_begin) and geometry.padded == geometry.input:
        return x
    padded = np.full(x.shape[:2] + geometry.padded, value, dtype=x.dtype)
    padded[interior(geometry)] = x
    return padded


def interior(geometry: WindowGeometry) -> tuple:
    """Index of the unpadded input inside the padded one."""
    return (Ellipsis,) + tuple(slice(b, b + n) for b, n in
                               zip(geometry.pads_begin, geometry.input))


def im2col(padded: np.ndarray, geometry: WindowGeometry) -> np.ndarray:
    """Windows of padded (N, C, *padded) as columns (N, C, K, *output), K kernel positions."""
    cols = np.empty(padded.shape[:2] + (geometry.kernel_size,) + geometry.output,
                    dtype=padded.dtype)
    for k, slices in geometry.kernel_slices():
        cols[:, :, k] = padded[(Ellipsis,) + slices]
    return cols


def col2im(cols: np.ndarray, geometry: WindowGeometry) -> np.ndarray:
    """Adjoint of im2col: sums columns (N, C, K, *output) back into the unpadded input
    (N, C, *input); what falls on padding is dropped."""
    padded = np.zeros(cols.shape[:2] + geometry.padded, dtype=cols.dtype)
    for k, slices in geometry.kernel_slices():
        padded[(Ellipsis,) + slices] += cols[:, :, k]
    return np.ascontiguousarray(padded[interior(geometry)])
