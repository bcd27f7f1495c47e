"""TensorFlow's padding for ONNX window geometry, shared by the convolution and pooling
families (``deep500.utils.onnx_interop.window`` computes the geometry)."""
from __future__ import annotations

from deep500.utils.onnx_interop.window import same_pads


def _tf_padding(sizes, kernel, strides, pads):
    """TensorFlow's padding for ONNX's per-axis (begin, end) ``pads`` of a window
    operation: ``("SAME" or "VALID", None)`` where these select the same windows, else
    ``("VALID", explicit zero padding)``. The end padding is cut to what the last window
    reads. (TensorFlow's gradient kernels for explicit padding are 2-4x slower than
    for SAME, and slower than a separate Pad.)"""
    trimmed = []
    for size, k, s, (begin, end) in zip(sizes, kernel, strides, pads):
        if size is not None:
            out = (size + begin + end - k) // s + 1
            end = min(end, max(0, (out - 1) * s + k - size - begin))
        trimmed.append((begin, end))
    if not any(b or e for b, e in trimmed):
        return "VALID", None
    if None not in sizes and trimmed == list(zip(*same_pads(sizes, kernel, strides,
                                                            [1] * len(kernel)))):
        return "SAME", None
    return "VALID", [[0, 0]] + [list(p) for p in trimmed] + [[0, 0]]
