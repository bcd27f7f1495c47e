"""What the string operators share: ONNX string tensors are NumPy object arrays of
Python ``str`` here (as ``onnx.numpy_helper`` reads them); NumPy's fixed-width ``U``
arrays and UTF-8 ``bytes`` elements are read as text too.
https://onnx.ai/onnx/repo-docs/IR.html#tensor-element-types"""
import numpy as np

from deep500.utils.errors import ShapeError


def text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def strings(x, op_type: str, what: str = "the input") -> np.ndarray:
    """``x`` as an object array of ``str``, or a ShapeError unless it holds strings."""
    x = np.asarray(x)
    if x.dtype.kind not in "OUS":
        raise ShapeError(f"{op_type}: {what} must be a string tensor, got dtype {x.dtype}")
    return string_array([text(v) for v in x.reshape(-1)], x.shape)


def string_array(values, shape) -> np.ndarray:
    """An object array of ``shape`` holding ``values`` (a flat sequence of ``str``)."""
    result = np.empty(len(values), dtype=object)
    result[:] = list(values)
    return result.reshape(shape)
