"""Compressed communication: the number format that travels on the wire.

A scheme with ``comm_dtype="float16"`` or ``"bfloat16"`` sends its (float32) gradients
or parameters in 16 bits and does its arithmetic in the buffer's own precision: each
received chunk is widened before it is reduced, and a partial result is narrowed again
only to be sent on (fp16 on the wire with fp32 arithmetic, as PyDTNN does; Micikevicius
et al., "Mixed Precision Training", ICLR 2018, for why the accumulation stays wide).

* ``float16``: IEEE 754 binary16 (NumPy's ``float16``; 11 significant bits, so a
  relative rounding error of at most 2^-11 per narrowing; largest finite 65504).
* ``bfloat16``: the upper 16 bits of an IEEE binary32 (1 sign, 8 exponent and 7
  fraction bits: float32's range, 8 significant bits, relative error at most 2^-8),
  as Google's TPUs and Intel's BF16 instructions define it. NumPy has no such dtype, so
  it travels as ``uint16`` holding those bits; narrowing rounds to nearest, ties to
  even (Intel, "BFLOAT16 - Hardware Numerics Definition", 2018, section 2.3), and a NaN
  stays a (quiet) NaN.

Both travel as 2-byte ``uint16`` payloads, so MPI only moves bytes (no MPI datatype
for half precision is needed) and the byte counters see exactly half of float32's.
"""
from __future__ import annotations

import numpy as np

from deep500.utils.errors import Deep500Error

#: The values of ``comm_dtype`` (the first is the default: no compression).
COMM_DTYPES = ("float32", "float16", "bfloat16")


def check_comm_dtype(value, where: str = "comm_dtype") -> str:
    """``value`` if it is one of ``COMM_DTYPES``, else a ``Deep500Error`` naming
    ``where``."""
    if not isinstance(value, str) or value not in COMM_DTYPES:
        raise Deep500Error(f"{where}={value!r} is not a communication dtype; choose one "
                           f"of {', '.join(COMM_DTYPES)} (float32, the default, sends "
                           f"the values as they are)")
    return value


class WireType:
    """How values of a wider float buffer travel in 16 bits.

    ``encode(values, out)`` narrows (rounding to nearest even) into ``out``, a
    ``uint16`` array of the same size; ``decode(wire, out)`` widens into ``out`` (any
    float dtype) exactly. ``itemsize`` is 2 bytes; ``name`` the ``comm_dtype``."""
    itemsize = 2
    storage = np.dtype(np.uint16)

    def __init__(self, name: str):
        self.name = check_comm_dtype(name)
        if name == "float32":
            raise Deep500Error("WireType is for a narrower wire than float32; float32 "
                               "sends the buffer as it is")

    def __repr__(self) -> str:
        return f"WireType({self.name!r})"

    def empty(self, count: int) -> np.ndarray:
        return np.empty(count, self.storage)

    def encode(self, values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = self.empty(values.size)
        if self.name == "float16":
            with np.errstate(over="ignore"):   # beyond 65504 is infinity, as in IEEE
                np.copyto(out.view(np.float16), values.reshape(-1), casting="same_kind")
            return out
        bits = np.asarray(values, np.float32).reshape(-1).view(np.uint32)
        # round to nearest even on the 16 bits dropped: add 0x7FFF plus the lowest kept
        # bit, then truncate (carries into the exponent give the right rounding, up to
        # infinity past the largest bfloat16)
        rounded = (bits >> 16) & 1
        rounded += 0x7FFF
        rounded += bits
        rounded >>= 16
        np.copyto(out, rounded, casting="unsafe")
        nan = np.isnan(values.reshape(-1))
        if nan.any():
            out[nan] = ((bits[nan] >> 16) & 0x8000) | 0x7FC0
        return out

    def decode(self, wire: np.ndarray, out: np.ndarray) -> np.ndarray:
        flat = out.reshape(-1)
        if self.name == "float16":
            np.copyto(flat, wire.view(np.float16), casting="same_kind")
            return out
        if flat.dtype == np.float32:
            np.left_shift(wire, 16, out=flat.view(np.uint32), dtype=np.uint32)
        else:
            widened = np.left_shift(wire, 16, dtype=np.uint32).view(np.float32)
            np.copyto(flat, widened, casting="same_kind")
        return out

    def round_trip(self, values: np.ndarray) -> np.ndarray:
        """``values`` as they arrive after one narrowing (a new array)."""
        return self.decode(self.encode(values), np.empty_like(values))

    @property
    def relative_precision(self) -> float:
        """The largest relative error of one narrowing of a normal number: half a unit
        in the last place, 2^-11 (float16) or 2^-8 (bfloat16)."""
        return 2.0 ** -11 if self.name == "float16" else 2.0 ** -8


def wire_type(comm_dtype: str | None) -> WireType | None:
    """The ``WireType`` of ``comm_dtype``; ``None`` for float32 (or ``None``), whose
    values go on the wire as they are."""
    if comm_dtype is None or check_comm_dtype(comm_dtype) == "float32":
        return None
    return WireType(comm_dtype)
