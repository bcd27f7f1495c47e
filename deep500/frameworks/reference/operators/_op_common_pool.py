"""Helpers shared by the windowed pooling operators (MaxPool, AveragePool): attribute
checks and their window geometry (:mod:`deep500.utils.onnx_interop.window`).
https://onnx.ai/onnx/operators/onnx__AveragePool.html"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.reference.operators._op_common_im2col import check_images
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.window import WindowGeometry, window_geometry

__all__ = ["pooling_geometry"]


def pooling_geometry(op, X: np.ndarray) -> WindowGeometry:
    """Window geometry of pooling operator ``op`` (a ReferenceOp) on input X."""
    name = op.op_type
    check_images(name, X)
    kernel = op.attr("kernel_shape")
    if kernel is None:
        raise ShapeError(f"{name}: the attribute kernel_shape is required")
    return window_geometry(name, X.shape[2:], kernel, strides=op.attr("strides"),
                           dilations=op.attr("dilations"), pads=op.attr("pads"),
                           auto_pad=op.attr("auto_pad"), ceil_mode=bool(op.attr("ceil_mode")))
