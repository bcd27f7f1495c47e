"""Allreduce with 16-bit values on the wire and the arithmetic in the buffer's precision,
through MPI: the user-defined operation and the narrowing around ``MPI_Allreduce``.

``CommunicationNetwork.allreduce(..., wire_dtype="float16" | "bfloat16")`` narrows a
float32 (or float64) buffer's values by a
:class:`~deep500.lv3_distributed.wire_dtype.WireType` (2 bytes each) and reduces them
at the buffer's precision. Deep500's ring does so itself
(``collectives.ring.Ring.run_narrowed``); MPI's allreduce (``collectives.mpi``, and
``iallreduce``) runs on the narrowed buffer (as ``uint16``) with a user-defined
commutative operation that widens both operands, reduces them, and narrows the result
(MPI-4.0 section 6.9.5): whatever algorithm MPI picks, each of its reductions is formed
at the wide precision and the wire carries 2 bytes per value. ``average`` divides the
widened sum by p. Modelled volume: the model of the full-width call with itemsize 2.

Each narrowing rounds to nearest (even), a relative error of at most 2^-11 for float16
and 2^-8 for bfloat16 of each value sent, so the result of p ranks differs from the
exact sum by at most about (p - 1) such roundings of partial sums plus one of the
result.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.wire_dtype import WireType


_OPS: dict = {}


def wire_operation(MPI, wire: WireType, ufunc, wide):
    """The MPI user-defined operation reducing narrowed values at precision ``wide``
    (created once per process for each wire, reduction and precision)."""
    key = (wire.name, ufunc.__name__, np.dtype(wide).str)
    if key not in _OPS:
        def reduce(inbuf, inoutbuf, datatype):
            a = np.frombuffer(inbuf, wire.storage)
            b = np.frombuffer(inoutbuf, wire.storage)
            wide_a = wire.decode(a, np.empty(a.size, wide))
            wide_b = wire.decode(b, np.empty(b.size, wide))
            ufunc(wide_a, wide_b, out=wide_b)
            wire.encode(wide_b, b)
        _OPS[key] = MPI.Op.Create(reduce, commute=True)
    return _OPS[key]


def narrowed_for_mpi(MPI, array: np.ndarray, wire: WireType, ufunc):
    """``(narrowed buffer, [buffer, MPI datatype], operation)`` for an
    ``MPI_Allreduce`` / ``MPI_Iallreduce`` of ``array`` with ``wire`` on the wire."""
    narrowed = wire.encode(array)
    return narrowed, [narrowed, MPI.UINT16_T], wire_operation(MPI, wire, ufunc,
                                                               array.dtype)


def finish_mpi(narrowed: np.ndarray, out: np.ndarray, wire: WireType, average: bool,
               size: int) -> np.ndarray:
    """Widen MPI's narrowed result into ``out`` (divided by ``size`` for an average)."""
    wire.decode(narrowed, out)
    if average:
        np.true_divide(out, size, out=out)
    return out
