"""Padding, im2col and col2im over any number of spatial axes, for convolution and
pooling. The window geometry itself (output extents, auto_pad, ceil_mode) is ONNX
semantics and lives in :mod:`deep500.utils.onnx_interop.window`.
https://onnx.ai/onnx/operators/onnx__Conv.html"""
from __future__ import annotations

import numpy as np

from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.window import WindowGeometry, window_geometry

__all__ = ["WindowGeometry", "check_images", "col2im", "im2col", "im2col_unpadded",
           "interior", "pad_spatial", "window_geometry"]


def check_images(op_type: str, X, W=None, weights: str = "") -> None:
    """A ShapeError unless X is (N, C, *spatial) with at least one spatial axis and the
    weights W (laid out as ``weights`` says, e.g. "(M, C/group, *kernel)") have X's
    rank."""
    if X.ndim < 3:
        raise ShapeError(f"{op_type}: input X must be (N, C, *spatial) with at least one "
                         f"spatial axis, got shape {X.shape}")
    if W is not None and W.ndim != X.ndim:
        raise ShapeError(f"{op_type}: weights W must be {weights} with the rank of X "
                         f"{X.shape}, got shape {W.shape}")


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


def im2col_unpadded(x: np.ndarray, geometry: WindowGeometry, value=0) -> np.ndarray:
    """``im2col(pad_spatial(x, geometry, value), geometry)`` without the padded copy:
    each kernel position copies the windows' elements that fall inside x and fills the
    output positions whose element falls on padding with ``value``."""
    cols = np.empty(x.shape[:2] + (geometry.kernel_size,) + geometry.output, dtype=x.dtype)
    rank = len(geometry.output)
    for k, slices in geometry.kernel_slices():
        target, source = [], []
        for axis, sl in enumerate(slices):
            # Output position o reads x at o·stride + offset, offset = kernel start in the
            # padded input minus the padding before it; valid for 0 <= index < input.
            stride, size = geometry.strides[axis], geometry.output[axis]
            offset = sl.start - geometry.pads_begin[axis]
            low = min(size, max(0, -(offset // stride) if offset < 0 else 0))
            last = geometry.input[axis] - 1 - offset   # largest o·stride that is inside
            high = max(low, min(size, last // stride + 1 if last >= 0 else 0))
            target.append(slice(low, high))
            start = low * stride + offset
            source.append(slice(start, start + (high - low - 1) * stride + 1, stride)
                          if high > low else slice(0, 0))
        position = cols[:, :, k]
        position[(Ellipsis,) + tuple(target)] = x[(Ellipsis,) + tuple(source)]
        for axis, sl in enumerate(target):   # the rest lies on padding
            before = [slice(None)] * rank
            after = [slice(None)] * rank
            before[axis], after[axis] = slice(0, sl.start), slice(sl.stop, None)
            if sl.start > 0:
                position[(Ellipsis,) + tuple(before)] = value
            if sl.stop < geometry.output[axis]:
                position[(Ellipsis,) + tuple(after)] = value
    return cols


def col2im(cols: np.ndarray, geometry: WindowGeometry) -> np.ndarray:
    """Adjoint of im2col: sums columns (N, C, K, *output) back into the unpadded input
    (N, C, *input); what falls on padding is dropped."""
    padded = np.zeros(cols.shape[:2] + geometry.padded, dtype=cols.dtype)
    for k, slices in geometry.kernel_slices():
        padded[(Ellipsis,) + slices] += cols[:, :, k]
    return np.ascontiguousarray(padded[interior(geometry)])
