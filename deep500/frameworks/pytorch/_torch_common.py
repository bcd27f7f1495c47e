"""Shared by the PyTorch visitor and its operator families (``ops/``): ONNX element types
as torch dtypes, NumPy arrays as tensors, ONNX pads in ``F.pad``'s order, string
attributes, and the ``visit_<op>`` of an operator that is one torch call."""
from __future__ import annotations

import numpy as np
import onnx

from deep500.utils.errors import UnsupportedError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")

# The bridge's name in Deep500's registries (framework errors, inner networks).
BRIDGE = "pytorch"


def torch_dtype(onnx_type) -> "torch.dtype":
    """The torch dtype of an ONNX element type (enum value, or name before opset 6)."""
    if isinstance(onnx_type, str):
        onnx_type = onnx.TensorProto.DataType.Value(onnx_type.upper())
    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(onnx_type)
        return torch.from_numpy(np.empty(0, np_dtype)).dtype
    except (KeyError, TypeError, ValueError):
        from deep500.frameworks.pytorch import extension_dtypes
        same_bits = extension_dtypes.same_bits_torch_dtype(onnx_type)  # bf16, float8
        if same_bits is not None:
            return same_bits
        name = onnx.TensorProto.DataType.Name(onnx_type)
        raise UnsupportedError(f"The PyTorch executor has no tensor type for ONNX "
                               f"{name}{extension_dtypes.carried_note(onnx_type)}") from None


def as_tensor(array: np.ndarray) -> "torch.Tensor":
    # A copy in PyTorch's allocator: 64-byte aligned, as kernels expect for their
    # fastest paths (NumPy's buffers are only 16-byte aligned).
    array = np.asarray(array, order="C")
    from deep500.frameworks.pytorch.extension_dtypes import is_extension, tensor_from_array
    return tensor_from_array(array).clone() if is_extension(array.dtype) else \
        torch.tensor(array)


def torch_pads(pads) -> list:
    """ONNX [b1, b2, ..., e1, e2, ...] → F.pad's (b_last, e_last, ..., b1, e1)."""
    half = len(pads) // 2
    result = []
    for axis in reversed(range(half)):
        result += [pads[axis], pads[half + axis]]
    return result


def text(value, default: str) -> str:
    """A string attribute (bytes in older models), or ``default`` when absent."""
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else value


def calls(fn):
    """The ``visit_<op>`` of an operator without attributes that is ``fn`` of all its
    inputs (``visit_sin = calls(torch.sin)``)."""
    def visit(self, op, network):
        self._emit(op, fn)
    visit.__doc__ = f"``{getattr(fn, '__name__', fn)}`` of the node's inputs."
    return visit
