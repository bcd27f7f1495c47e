"""Tensor descriptors: dtype, shape and layout, convertible between NumPy, PyTorch,
TensorFlow and the C struct ``tensor_t`` that C++ operators read.

The C layout of ``tensor_t`` (C++ operators declare the same struct; the test suite
compiles a C reader of it) is::

    #define D500_MAX_DIMS 8
    typedef struct {
        int32_t dtype;                 // one of D500_FLOAT32 ... (see DTYPE_CODES)
        int32_t ndim;                  // number of used entries in shape
        int64_t shape[D500_MAX_DIMS];  // row-major extents, unused entries are 0
    } tensor_t;
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from deep500.utils.errors import ShapeError, UnsupportedError

MAX_DIMS = 8

# Codes shared with C++; append only, never renumber.
DTYPE_CODES = {
    np.dtype(np.float32): 0,
    np.dtype(np.float64): 1,
    np.dtype(np.int32): 2,
    np.dtype(np.int64): 3,
    np.dtype(np.float16): 4,
    np.dtype(np.uint8): 5,
    np.dtype(np.int8): 6,
    np.dtype(np.bool_): 7,
}
DTYPES_BY_CODE = {code: dtype for dtype, code in DTYPE_CODES.items()}


class tensor_t(ctypes.Structure):  # noqa: N801 - the C name
    """ctypes mirror of the C ``tensor_t`` struct described in the module docstring."""
    _fields_ = [("dtype", ctypes.c_int32),
                ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_DIMS)]


def _numpy_dtype(dtype: Any) -> np.dtype:
    """Normalise a NumPy, PyTorch or TensorFlow dtype (or its name) to a NumPy dtype."""
    module = type(dtype).__module__
    if module.startswith("torch"):
        import torch
        try:
            return np.dtype(torch.empty((), dtype=dtype).numpy().dtype)
        except TypeError as exc:  # e.g. torch.bfloat16: no NumPy counterpart
            raise UnsupportedError(f"PyTorch dtype {dtype} has no NumPy counterpart") from exc
    if module.startswith("tensorflow"):
        return np.dtype(dtype.as_numpy_dtype)
    try:
        return np.dtype(dtype)
    except TypeError as exc:
        raise UnsupportedError(f"Unknown dtype {dtype!r}: use a NumPy, PyTorch or "
                               f"TensorFlow dtype, or a name such as 'float32'") from exc


@dataclass(frozen=True)
class TensorDescriptor:
    """What a tensor is, without its data: element type, shape and memory layout.

    ``layout`` names the meaning of the axes (e.g. ``"NCHW"``); ``None`` means plain
    row-major with no named axes.
    """
    dtype: np.dtype
    shape: tuple
    layout: str | None = None

    def __init__(self, dtype: Any, shape: Sequence[int], layout: str | None = None):
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"Tensor shape {shape} has a negative extent")
        if layout is not None and len(layout) != len(shape):
            raise ShapeError(f"Layout {layout!r} names {len(layout)} axes but the shape "
                             f"{shape} has {len(shape)}")
        object.__setattr__(self, "dtype", _numpy_dtype(dtype))
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "layout", layout)

    # -- sizes ---------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    # -- NumPy ---------------------------------------------------------------------
    @classmethod
    def from_numpy(cls, array: np.ndarray, layout: str | None = None) -> "TensorDescriptor":
        return cls(array.dtype, array.shape, layout)

    def empty(self) -> np.ndarray:
        """A new uninitialised NumPy array matching this descriptor."""
        return np.empty(self.shape, self.dtype)

    def matches(self, array: Any) -> bool:
        return tuple(array.shape) == self.shape and _numpy_dtype(array.dtype) == self.dtype

    def check(self, array: Any, where: str) -> None:
        """Raise a ShapeError naming ``where`` if ``array`` does not match."""
        if not self.matches(array):
            raise ShapeError(f"{where}: expected {self}, got a tensor of shape "
                             f"{tuple(array.shape)} and dtype {_numpy_dtype(array.dtype)}")

    # -- PyTorch -------------------------------------------------------------------
    def torch_dtype(self):
        import torch
        return torch.from_numpy(np.empty(0, self.dtype)).dtype

    @classmethod
    def from_torch(cls, tensor, layout: str | None = None) -> "TensorDescriptor":
        return cls(tensor.dtype, tuple(tensor.shape), layout)

    # -- TensorFlow ----------------------------------------------------------------
    def tf_dtype(self):
        from deep500.utils.tensorflow_import import import_tensorflow
        return import_tensorflow().as_dtype(self.dtype)

    @classmethod
    def from_tf(cls, tensor, layout: str | None = None) -> "TensorDescriptor":
        return cls(tensor.dtype, tuple(int(s) for s in tensor.shape), layout)

    # -- C -------------------------------------------------------------------------
    def to_tensor_t(self) -> tensor_t:
        if self.dtype not in DTYPE_CODES:
            raise UnsupportedError(f"dtype {self.dtype} cannot be passed to C++ operators; "
                                   f"supported: {sorted(str(d) for d in DTYPE_CODES)}")
        if self.ndim > MAX_DIMS:
            raise UnsupportedError(f"C++ operators take at most {MAX_DIMS} dimensions, "
                                   f"got shape {self.shape}")
        desc = tensor_t()
        desc.dtype = DTYPE_CODES[self.dtype]
        desc.ndim = self.ndim
        for axis, extent in enumerate(self.shape):
            desc.shape[axis] = extent
        return desc

    @classmethod
    def from_tensor_t(cls, desc: tensor_t) -> "TensorDescriptor":
        if desc.dtype not in DTYPES_BY_CODE:
            raise UnsupportedError(f"Unknown tensor_t dtype code {desc.dtype}")
        if not 0 <= desc.ndim <= MAX_DIMS:
            raise UnsupportedError(f"tensor_t ndim is {desc.ndim}; it must be in "
                                   f"0..{MAX_DIMS}")
        return cls(DTYPES_BY_CODE[desc.dtype], list(desc.shape[:desc.ndim]))

    # -- text form -----------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "TensorDescriptor":
        """``"float32:8x16"`` (dtype, colon, extents joined by x; ``"float64:"`` is a
        scalar), as written on the command line and in recipes."""
        dtype, sep, extents = str(text).partition(":")
        try:
            shape = [int(e) for e in extents.lower().split("x")] if extents.strip() else []
            if not sep:
                raise ValueError
            return cls(dtype.strip(), shape)
        except (ValueError, UnsupportedError, ShapeError):
            raise ShapeError(f"{text!r} is not a tensor descriptor; write DTYPE:SHAPE, e.g. "
                             f"float32:8x16 (float64: for a scalar)") from None

    # -- serialisation -------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"dtype": str(self.dtype), "shape": list(self.shape), "layout": self.layout}

    def __str__(self) -> str:
        layout = f", layout={self.layout}" if self.layout else ""
        return f"tensordesc({self.dtype}, {list(self.shape)}{layout})"


tensordesc = TensorDescriptor
