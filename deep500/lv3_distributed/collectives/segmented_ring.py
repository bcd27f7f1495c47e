"""The ring allreduce pipelined in segments (P. Patarasuk, X. Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations", JPDC 69(2), 2009, the pipelined
ring).

Each step's chunk travels as segments of at most ``segment_bytes`` (a whole number of
elements, at least one) with non-blocking ``Isend``/``Irecv``; the receives of the next
step are posted before this step's segments are reduced, and each segment is forwarded
to the right as soon as it is reduced (allgather: as soon as it arrives), so reducing
segment j overlaps the transfer of segment j + 1 and the next step starts before this
one has finished. Same bytes as the ring; messages: one per segment of every chunk sent.

It can also narrow the wire (``run_narrowed``), as the ring does: each segment travels
as a :class:`~deep500.lv3_distributed.wire_dtype.WireType` and is added, widened, to the
receiver's own values; the owner of a reduced chunk narrows it once and the allgather
forwards the narrowed segments, which every rank widens at the end. Segments hold
``segment_bytes`` of the wire's values.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm, flat_result
from deep500.lv3_distributed.collectives.messages import Counter, chunk_bounds
from deep500.lv3_distributed.collectives.pricing import shared, swap
from deep500.lv3_distributed.message_tags import (NARROWED_SEGMENT_ALLGATHER,
                                                  NARROWED_SEGMENT_REDUCE_SCATTER,
                                                  SEGMENT_ALLGATHER,
                                                  SEGMENT_REDUCE_SCATTER)
from deep500.lv3_distributed.option_checks import check_byte_count
from deep500.lv3_distributed.volume import Traffic, ring_allreduce_traffic, ring_chunks
from deep500.utils.errors import Deep500Error

#: Default segment size (bytes).
DEFAULT_SEGMENT_BYTES = 1 << 20


def check_segment_bytes(value, where: str = "segment_bytes") -> int:
    """``value`` if it is a positive integer number of bytes, else a ``Deep500Error``."""
    return check_byte_count(value, where, DEFAULT_SEGMENT_BYTES)


def segment_elements(segment_bytes: int, itemsize: int) -> int:
    """Elements per segment: the whole elements that fit in ``segment_bytes``, at least
    one."""
    return max(1, int(segment_bytes) // itemsize)


def _segments(elements: int, per_segment: int) -> int:
    return max(1, -(-elements // per_segment))


class SegmentedRing(AllreduceAlgorithm):
    """The ring with every chunk sent as segments (module docstring)."""
    name = "segmented_ring"
    options = ("segment_bytes",)
    narrows_on_wire = True

    def _run(self, net, target, ufunc, average, segment_bytes=None) -> Traffic:
        """Reduce-scatter step s receives chunk (r - s - 1) from the left and reduces
        it; chunk (r - s) goes to the right (at step 0 this rank's own, later the chunk
        just reduced, forwarded segment by segment). Allgather step s receives chunk
        (r - s) straight into ``target`` and forwards it at step s + 1.
        ``segment_bytes``: default the network's."""
        segment_bytes = (net.segment_bytes if segment_bytes is None
                         else check_segment_bytes(segment_bytes))
        return _pipelined(net, target, ufunc, average,
                          segment_elements(segment_bytes, target.itemsize), None,
                          (SEGMENT_REDUCE_SCATTER, SEGMENT_ALLGATHER))

    def run_narrowed(self, net, array, out, reduction, wire,
                     segment_bytes=None) -> Traffic:
        """``_run`` with every segment narrowed to ``wire`` (module docstring); segments
        of ``segment_bytes`` (default the network's) of wire values. Bytes: the
        full-width algorithm's with the wire's itemsize."""
        segment_bytes = (net.segment_bytes if segment_bytes is None
                         else check_segment_bytes(segment_bytes))
        return _pipelined(net, flat_result(array, out), reduction.ufunc, reduction.average,
                          segment_elements(segment_bytes, wire.itemsize), wire,
                          (NARROWED_SEGMENT_REDUCE_SCATTER, NARROWED_SEGMENT_ALLGATHER))

    @lru_cache(maxsize=4096)
    def _traffic(self, count, itemsize, size, rank, segment_bytes=None) -> Traffic:
        """The bytes of the ring; a chunk of c_i elements travels as k_i = max(1,
        ceil(c_i / e)) messages, e = ``segment_elements(segment_bytes, itemsize)``, so
        (indices mod p)::

            messages sent     = sum_{i != r+1} k_i + sum_{i != r+2} k_i
            messages received = sum_{i != r} k_i + sum_{i != r+1} k_i

        which is 2(p - 1) ceil(n / (p e)) each way when p divides the n elements."""
        ring = ring_allreduce_traffic(count, itemsize, size, rank)
        e = segment_elements(DEFAULT_SEGMENT_BYTES if segment_bytes is None
                             else segment_bytes, itemsize)
        k = [_segments(c, e) for c in ring_chunks(count, size)]
        total = sum(k)
        sent = 2 * total - k[(rank + 1) % size] - k[(rank + 2) % size]
        received = 2 * total - k[rank] - k[(rank + 1) % size]
        return Traffic(ring.bytes_sent, ring.bytes_received, sent, received)

    def _cost(self, m, n, p, segment_bytes=None) -> float:
        """Every chunk of n/p sent as k = ⌈n/(p s)⌉ segments of at most s bytes:
        T = 2(p-1)kα + 2(p-1)/p nβ + (p-1)/p nγ. Pipelining can hide the sums behind
        transfers on a machine with idle cores; this model does not assume it (it is
        exact for a blocking segment loop). δ as for the ring."""
        s = _segment_size(segment_bytes)
        c = n / p
        k = max(1, math.ceil(c / s))
        last = c - (k - 1) * s
        per_chunk_reduce = (k - 1) * swap(m, s, reduce=True) + swap(m, last, reduce=True)
        per_chunk_copy = (k - 1) * swap(m, s) + swap(m, last)
        return (p - 1) * (per_chunk_reduce + per_chunk_copy + shared(m, c, "sum", False)
                          + shared(m, c, "receive"))


def _segment_size(segment_bytes) -> float:
    """The segment size the model prices: ``segment_bytes`` (a number of bytes >= 1,
    finite) or, when None, the default."""
    if segment_bytes is None:
        return float(DEFAULT_SEGMENT_BYTES)
    try:
        size = float(segment_bytes)
    except (TypeError, ValueError, OverflowError):
        size = math.nan
    if isinstance(segment_bytes, bool) or not 1 <= size < math.inf:
        raise Deep500Error(f"segmented_ring: segment_bytes is {segment_bytes!r}; give a "
                           f"number of bytes >= 1 (the default is {DEFAULT_SEGMENT_BYTES})")
    return size


def _pipelined(net, target, ufunc, average, per_segment: int, wire, tags) -> Traffic:
    """The segmented ring on the flat ``target``, in place (``SegmentedRing._run``'s
    steps). ``wire``: None sends the values as they are; a ``WireType`` sends them
    narrowed: each segment is narrowed as it leaves, widened as it is reduced, the
    owned chunk narrowed once, and ``target`` widened from the narrowed result at the
    end."""
    MPI = net._MPI
    p, r, comm, counter = net.size, net.rank, net._own, Counter()
    bounds = chunk_bounds(target.size, p)
    right, left = (r + 1) % p, (r - 1) % p
    largest = bounds[1] - bounds[0]
    if wire is None:
        moving = target                    # what travels, at the values' positions
        scratch = net._scratch_for(target.dtype, 2 * largest)
        halves = (scratch[:largest], scratch[largest:])
    else:
        moving = wire.empty(target.size)
        halves = (wire.empty(largest), wire.empty(largest))
        widened = np.empty(largest, target.dtype)

    def values(part, lo, hi):
        return part if wire is None else wire.decode(part, widened[:hi - lo])

    def narrow(lo, hi):
        if wire is not None:
            wire.encode(target[lo:hi], moving[lo:hi])

    def segments(chunk):
        lo, hi = bounds[chunk], bounds[chunk + 1]
        starts = range(lo, hi, per_segment) if hi > lo else [lo]
        return [(start, min(start + per_segment, hi)) for start in starts]

    def isend(lo, hi, tag, sends):
        sends.append(comm.Isend(moving[lo:hi], right, tag))
        counter.send(moving[lo:hi].nbytes)
        net._outbox.add(moving[lo:hi].nbytes)

    def post_receives(chunk, buffer, offset, tag):
        posted = []
        for lo, hi in segments(chunk):
            part = buffer[lo - offset:hi - offset]
            posted.append((comm.Irecv(part, left, tag), part, lo, hi))
            counter.receive(part.nbytes)
        return posted

    def wait(request, part):
        request.Wait(net._status)
        net._check_received(net._status, part.nbytes, "allreduce", left)

    sends, tag = [], tags[0]
    for lo, hi in segments(r % p):
        narrow(lo, hi)
        isend(lo, hi, tag, sends)
    pending = post_receives((r - 1) % p, halves[0], bounds[(r - 1) % p], tag)
    for step in range(p - 1):
        following = None
        if step + 1 < p - 1:
            after = (r - step - 2) % p
            following = post_receives(after, halves[(step + 1) % 2], bounds[after], tag)
        for request, part, lo, hi in pending:
            wait(request, part)
            ufunc(target[lo:hi], values(part, lo, hi), out=target[lo:hi])
            if following is not None:  # the reduced segment goes on at the next step
                narrow(lo, hi)
                isend(lo, hi, tag, sends)
        pending = following
    owned = (r + 1) % p
    if average:
        chunk = target[bounds[owned]:bounds[owned + 1]]
        np.true_divide(chunk, p, out=chunk)
    narrow(bounds[owned], bounds[owned + 1])
    MPI.Request.Waitall(sends)
    sends, tag = [], tags[1]
    received = [post_receives((r - step) % p, moving, 0, tag) for step in range(p - 1)]
    for lo, hi in segments(owned):
        isend(lo, hi, tag, sends)
    for step in range(p - 1):
        for request, part, lo, hi in received[step]:
            wait(request, part)
            if step + 1 < p - 1:
                isend(lo, hi, tag, sends)
    MPI.Request.Waitall(sends)
    if wire is not None:
        wire.decode(moving, target)
    return counter.traffic()


SEGMENTED_RING = SegmentedRing()
