"""ONNX's extension element types between NumPy and PyTorch, bit for bit.

NumPy holds bfloat16, the 8-bit floats, the 4- and 2-bit integers and the 4-bit float
through ``ml_dtypes``; ``torch.from_numpy`` and ``Tensor.numpy`` take none of them.

* Types PyTorch has (bfloat16, float8 E4M3FN/E4M3FNUZ/E5M2/E5M2FNUZ/E8M0) cross
  through their raw bits (``ndarray.view(uint8/int16)`` ↔ ``Tensor.view(dtype)``), so no
  value is rounded on the way.
* Types PyTorch stores but cannot compute with (int4, uint4, int2, uint2, float4 E2M1)
  are *carried* in a wider type that holds every value exactly (int8, uint8, float32).
  The ONNX operators that take them (Cast, CastLike, DequantizeLinear, and the ones
  that only move values: Identity, Reshape, Transpose, ...) give bit-identical results
  on the carrier; the ones that *produce* them (Cast/CastLike/QuantizeLinear to these
  types) round and saturate to the type's values in the carrier (``ops/_cast.py``), and
  the graph outputs declared in these types are returned in them. ``torch_dtype`` has
  no tensor type for them: a node that would compute with them otherwise is refused
  (UnsupportedError).

https://onnx.ai/onnx/technical/float8.html, https://onnx.ai/onnx/technical/int4.html
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx

from deep500.utils.errors import UnsupportedError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")

# ONNX element type -> (NumPy type, torch type with the same bits)
_SAME_BITS_NAMES = {
    "BFLOAT16": ("bfloat16", "bfloat16"),
    "FLOAT8E4M3FN": ("float8_e4m3fn", "float8_e4m3fn"),
    "FLOAT8E4M3FNUZ": ("float8_e4m3fnuz", "float8_e4m3fnuz"),
    "FLOAT8E5M2": ("float8_e5m2", "float8_e5m2"),
    "FLOAT8E5M2FNUZ": ("float8_e5m2fnuz", "float8_e5m2fnuz"),
    "FLOAT8E8M0": ("float8_e8m0fnu", "float8_e8m0fnu"),
}
# ONNX element type -> (NumPy type, NumPy type that carries every value exactly)
_CARRIED_NAMES = {
    "INT4": ("int4", np.int8),
    "UINT4": ("uint4", np.uint8),
    "INT2": ("int2", np.int8),
    "UINT2": ("uint2", np.uint8),
    "FLOAT4E2M1": ("float4_e2m1fn", np.float32),
}


def _available(table: dict) -> dict:
    """Entries whose ONNX, ml_dtypes (and torch) types all exist in these versions."""
    result = {}
    for onnx_name, (np_name, other) in table.items():
        if not hasattr(onnx.TensorProto, onnx_name) or not hasattr(ml_dtypes, np_name):
            continue
        if isinstance(other, str):
            if not hasattr(torch, other):
                continue
            other = getattr(torch, other)
        result[getattr(onnx.TensorProto, onnx_name)] = (np.dtype(getattr(ml_dtypes,
                                                                         np_name)), other)
    return result


# ml_dtypes names of the carried types, for carried_types.carriers
CARRIED_NAMES = tuple(np_name for np_name, _ in _CARRIED_NAMES.values())
_SAME_BITS = _available(_SAME_BITS_NAMES)
_CARRIED = _available(_CARRIED_NAMES)
_NUMPY_TO_TORCH = {np_dtype: torch_type for np_dtype, torch_type in _SAME_BITS.values()}
_TORCH_TO_NUMPY = {torch_type: np_dtype for np_dtype, torch_type in _SAME_BITS.values()}
_CARRIERS = {np_dtype: np.dtype(carrier) for np_dtype, carrier in _CARRIED.values()}
# Integer views of the same width, which both NumPy and PyTorch can hold.
_BITS_NUMPY = {1: np.uint8, 2: np.int16}
_BITS_TORCH = {1: torch.uint8, 2: torch.int16}


def same_bits_torch_dtype(onnx_type: int):
    """The torch dtype with the same bits as ONNX element type ``onnx_type`` (bfloat16,
    the 8-bit floats), or None."""
    entry = _SAME_BITS.get(onnx_type)
    return entry[1] if entry else None


def is_extension(np_dtype) -> bool:
    np_dtype = np.dtype(np_dtype)
    return np_dtype in _NUMPY_TO_TORCH or np_dtype in _CARRIERS


def tensor_from_array(array: np.ndarray, name: str = "") -> "torch.Tensor":
    """A CPU tensor holding ``array``'s values exactly; extension types cross through
    their bits or are carried (see the module docstring). Shares memory where
    ``torch.from_numpy`` would, i.e. for a C-contiguous writeable ``array``."""
    dtype = array.dtype
    same = _NUMPY_TO_TORCH.get(dtype)
    if same is not None:
        # np.require keeps a 0-d array 0-d (np.ascontiguousarray makes it 1-d)
        bits = np.require(array, requirements="C").view(_BITS_NUMPY[dtype.itemsize])
        return torch.from_numpy(bits).view(same)
    carrier = _CARRIERS.get(dtype)
    if carrier is not None:
        return torch.from_numpy(array.astype(carrier))
    try:
        return torch.from_numpy(array)
    except TypeError:
        where = f" for {name!r}" if name else ""
        raise UnsupportedError(f"The PyTorch executor has no tensor type for NumPy "
                               f"{dtype}{where}; supported: NumPy's numeric types, "
                               f"bool, and ml_dtypes' bfloat16, float8, int4/uint4, "
                               f"int2/uint2 and float4_e2m1fn") from None


def array_from_tensor(tensor: "torch.Tensor") -> np.ndarray:
    """``tensor`` (on the CPU, detached) as a NumPy array; bfloat16 and the 8-bit float
    types become their ml_dtypes types, bit for bit. Shares memory like ``numpy()``."""
    np_dtype = _TORCH_TO_NUMPY.get(tensor.dtype)
    if np_dtype is None:
        return tensor.numpy()
    return tensor.view(_BITS_TORCH[np_dtype.itemsize]).numpy().view(np_dtype)


def carried_type(onnx_type) -> np.dtype | None:
    """The ml_dtypes type of ONNX element type ``onnx_type`` if PyTorch carries it in a
    wider one (int4, uint4, int2, uint2, float4 E2M1), else None."""
    entry = _CARRIED.get(onnx_type)
    return entry[0] if entry else None


def is_carried(np_dtype) -> bool:
    """Whether ``np_dtype`` is an ml_dtypes type carried in a wider torch type (False
    for anything else, torch dtypes included)."""
    return isinstance(np_dtype, np.dtype) and np_dtype in _CARRIERS


def carrier_torch_dtype(np_dtype) -> "torch.dtype":
    """The torch dtype that carries ml_dtypes type ``np_dtype`` (int8, uint8, float32)."""
    return torch.from_numpy(np.empty(0, _CARRIERS[np.dtype(np_dtype)])).dtype


def carried_note(onnx_type: int) -> str:
    """Why a carried ONNX type (int4, ...) has no torch dtype, for error messages."""
    entry = _CARRIED.get(onnx_type)
    if entry is None:
        return ""
    return (f" ({entry[0]} values are carried as {np.dtype(entry[1])}: Cast, CastLike "
            f"and QuantizeLinear produce them, DequantizeLinear, Cast and the operators "
            f"that move values read them, other operators do not compute with them); "
            f"run the model on the reference executor")
