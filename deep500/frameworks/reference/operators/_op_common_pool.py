"""Helpers shared by the windowed pooling operators (MaxPool, AveragePool): attribute
checks and window geometry, and per-axis counts of the elements a window covers.
https://onnx.ai/onnx/operators/onnx__AveragePool.html"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.reference.operators._op_common_im2col import (WindowGeometry,
                                                                       window_geometry)
from deep500.utils.errors import ShapeError


def pooling_geometry(op, X: np.ndarray) -> WindowGeometry:
    """Window geometry of pooling operator ``op`` (a ReferenceOp) on input X."""
    name = op.op_type
    if X.ndim < 3:
        raise ShapeError(f"{name}: input X must be (N, C, *spatial) with at least one "
                         f"spatial axis, got shape {X.shape}")
    kernel = op.attr("kernel_shape")
    if kernel is None:
        raise ShapeError(f"{name}: the attribute kernel_shape is required")
    return window_geometry(name, X.shape[2:], kernel, strides=op.attr("strides"),
                           dilations=op.attr("dilations"), pads=op.attr("pads"),
                           auto_pad=op.attr("auto_pad"), ceil_mode=bool(op.attr("ceil_mode")))


def window_counts(geometry: WindowGeometry, include_pad: bool) -> np.ndarray:
    """Number of elements each window averages over, shaped like the output.

    Counts input elements only, or with ``include_pad`` also the padding (explicit or
    from auto_pad) but never the ceil_mode overhang past it. Windows are boxes, so the
    count is a product of per-axis counts.
    """
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
