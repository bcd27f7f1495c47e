"""Padding, im2col and col2im over any number of spatial axes, for convolution and
pooling. The window geometry itself (output extents, auto_pad, ceil_mode) is ONNX
semantics and lives in :mod:`deep500.utils.onnx_interop.window`.
https://onnx.ai/onnx/operators/onnx__Conv.html"""
from __future__ import annotations

import numpy as np

from deep500.utils.onnx_interop.window import WindowGeometry, window_geometry

__all__ = ["WindowGeometry", "col2im", "im2col", "interior", "pad_spatial",
           "window_geometry"]


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
