"""Helpers for operators with NumPy-style (multidirectional) broadcasting.
https://onnx.ai/onnx/repo-docs/Broadcasting.html"""
import numpy as np


def unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``grad`` over the axes along which an input of ``shape`` was broadcast."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    reduced = grad.sum(axis=tuple(range(extra))) if extra > 0 else grad
    axes = tuple(i for i, extent in enumerate(shape) if extent == 1 and reduced.shape[i] != 1)
    if axes:
        reduced = reduced.sum(axis=axes, keepdims=True)
    return reduced.reshape(shape)
