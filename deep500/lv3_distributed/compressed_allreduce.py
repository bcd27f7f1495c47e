"""Allreduce with 16-bit values on the wire and the arithmetic in the buffer's precision.

``CommunicationNetwork.allreduce(..., wire_dtype="float16" | "bfloat16")`` runs one of
these on a float32 (or float64) buffer; the values travel narrowed by a
:class:`~deep500.lv3_distributed.wire_dtype.WireType` (2 bytes each), every reduction
widens what it received first, so sums are formed in float32 (float64), and a partial
result is narrowed again only to be sent on.

* ``ring``: Patarasuk & Yuan's ring (JPDC 2009) as in ``communication.py``. Reduce-
  scatter step s narrows chunk (r - s) (this rank's own values at step 0, afterwards the
  partial sum it has just formed), sends it to the right, and adds the chunk received
  from the left, widened, to this rank's own values of that chunk. The owner of a fully
  reduced chunk divides it (``average``), narrows it once, and the allgather passes the
  narrowed chunks around; at the end every rank widens the whole narrowed result, its
  own chunk included, so all ranks hold bit-identical values. Bytes: exactly those of
  the float32 ring with itemsize 2 (``volume.ring_allreduce_traffic``), i.e. half.
* ``mpi``: ``MPI_Allreduce`` on the narrowed buffer (as ``uint16``) with a user-defined
  commutative operation that widens both operands, reduces them, and narrows the result
  (MPI-4.0 section 6.9.5): whatever algorithm MPI picks, each of its reductions is
  formed at the wide precision and the wire carries 2 bytes per value. ``average``
  divides the widened sum by p. Modelled volume: the model of the float32 call with
  itemsize 2.

Each narrowing rounds to nearest (even), a relative error of at most 2^-11 for float16
and 2^-8 for bfloat16 of each value sent, so the result of p ranks differs from the
exact sum by at most about (p - 1) such roundings of partial sums plus one of the
result.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.volume import Traffic, ring_chunks
from deep500.lv3_distributed.wire_dtype import WireType

# Tags on Deep500's own (duplicated) communicator; communication.py and
# allreduce_algorithms.py use 1-22.
_TAG_WIRE_REDUCE_SCATTER, _TAG_WIRE_ALLGATHER = 23, 24

#: The allreduce algorithms that can carry a narrower wire dtype.
WIRE_ALGORITHMS = ("ring", "mpi")


def ring(net, source: np.ndarray, target: np.ndarray, ufunc, average: bool,
         wire: WireType) -> Traffic:
    """The ring allreduce of the flat ``source`` into the flat ``target`` (may be the
    same array) with ``wire`` on the wire; returns the traffic handed to MPI."""
    p, r = net.size, net.rank
    chunks = ring_chunks(source.size, p)
    bounds = np.concatenate(([0], np.cumsum(chunks))).tolist()
    right, left = (r + 1) % p, (r - 1) % p
    largest = max(chunks)
    narrowed = wire.empty(source.size)             # the buffer as it travels
    incoming = wire.empty(largest)
    widened = np.empty(largest, target.dtype)
    status, sendrecv = net._status, net._own.Sendrecv
    sent = received = 0
    for step in range(p - 1):
        send_chunk, recv_chunk = (r - step) % p, (r - step - 1) % p
        a, b = bounds[send_chunk], bounds[send_chunk + 1]
        outgoing = wire.encode((source if step == 0 else target)[a:b], narrowed[a:b])
        lo, hi = bounds[recv_chunk], bounds[recv_chunk + 1]
        arrived = incoming[:hi - lo]
        sendrecv(outgoing, right, _TAG_WIRE_REDUCE_SCATTER, arrived, left,
                 _TAG_WIRE_REDUCE_SCATTER, status)
        net._check_received(status, arrived.nbytes, "allreduce", left)
        ufunc(source[lo:hi], wire.decode(arrived, widened[:hi - lo]), out=target[lo:hi])
        sent += outgoing.nbytes
        received += arrived.nbytes
    owned = (r + 1) % p
    lo, hi = bounds[owned], bounds[owned + 1]
    if average:
        np.true_divide(target[lo:hi], p, out=target[lo:hi])
    wire.encode(target[lo:hi], narrowed[lo:hi])
    for step in range(p - 1):
        send_chunk, recv_chunk = (r + 1 - step) % p, (r - step) % p
        outgoing = narrowed[bounds[send_chunk]:bounds[send_chunk + 1]]
        arrived = narrowed[bounds[recv_chunk]:bounds[recv_chunk + 1]]
        sendrecv(outgoing, right, _TAG_WIRE_ALLGATHER, arrived, left, _TAG_WIRE_ALLGATHER,
                 status)
        net._check_received(status, arrived.nbytes, "allreduce", left)
        sent += outgoing.nbytes
        received += arrived.nbytes
    wire.decode(narrowed, target)
    return Traffic(sent, received, 2 * (p - 1), 2 * (p - 1))


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
