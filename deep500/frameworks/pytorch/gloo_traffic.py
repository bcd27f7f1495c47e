"""The bytes and messages of gloo's CPU collectives, computed from gloo's own algorithms.

PyTorch's gloo backend sends its messages over its own TCP pairs, which Deep500 cannot
count; :class:`~deep500.frameworks.pytorch.distributed.PyTorchDistributedDataParallel`
records these models instead, marked ``modelled (gloo ring)`` and
``modelled (gloo binomial tree)``.

* ``ProcessGroupGloo::allreduce`` on CPU tensors calls ``gloo::allreduce`` with the
  algorithm unspecified, which is the ring (``gloo/allreduce.cc``, ``ring()``; the
  gloo built into torch 2.13 has no other CPU allreduce): a reduce-scatter, then an
  allgather, each over ``numSegments - numSegments/p`` pipelined steps. The buffer is
  cut into ``numSegments`` equal segments (at least ``2p``, a multiple of ``p``, at most
  ``kMaxSegmentSize`` = 1 MiB each, rounded up to whole elements); a step sends one
  segment to rank ``r - 1`` and receives one from ``r + 1``; segments that fall past the
  end of the buffer are shorter or not sent at all. When ``p`` divides the buffer
  evenly this is the bandwidth-optimal ring of Patarasuk & Yuan (JPDC 2009),
  ``2(p-1)/p * n`` bytes each way per rank.
* ``ProcessGroupGloo::broadcast`` calls ``gloo::broadcast`` (``gloo/broadcast.cc``): a
  binomial tree over ranks renumbered so the root is 0; in round ``i`` every virtual
  rank below ``2^i`` sends the whole buffer to virtual rank ``v + 2^i``.

Byte counts are payload bytes; gloo's per-message headers are not included (as for
:mod:`deep500.lv3_distributed.volume`). Checked against the kernel: on Linux, the bytes
a rank wrote through system calls (``wchar`` of ``/proc/self/io``, which counts gloo's
``writev`` to its sockets) during DDP steps were the modelled payload plus 144 B per
modelled message, for one and for two buckets (torch 2.13, 2 ranks;
``tests/frameworks/test_pytorch_distributed.py`` checks the bound).
"""
from __future__ import annotations

from functools import lru_cache

from deep500.lv3_distributed.volume import Traffic

#: gloo's ``AllreduceOptionsImpl::kMaxSegmentSize``.
GLOO_MAX_SEGMENT_BYTES = 1024 * 1024


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@lru_cache(maxsize=1024)
def gloo_ring_allreduce_traffic(count: int, itemsize: int, size: int, rank: int,
                                max_segment_bytes: int = GLOO_MAX_SEGMENT_BYTES) -> Traffic:
    """One rank's traffic in ``gloo::allreduce`` (ring) of ``count`` elements of
    ``itemsize`` bytes over ``size`` ranks: the offsets and lengths of ``ring()`` in
    ``gloo/allreduce.cc``, summed."""
    total = count * itemsize
    if size == 1 or total == 0:
        return Traffic(0, 0, 0, 0)
    max_segment = itemsize * max(1, max_segment_bytes // itemsize)
    segments = _round_up(max(-(-total // max_segment), 2 * size), size)
    per_rank = segments // size
    segment = _round_up(-(-total // segments), itemsize)
    span = segments * segment
    sent = received = messages_sent = messages_received = 0
    for i in range(segments - per_rank):
        # reduce-scatter sends segment (r+1)*per_rank+i, receives (r+2)*per_rank+i;
        # the allgather sends r*per_rank+i, receives (r+1)*per_rank+i.
        for first, out in ((rank + 1, True), (rank + 2, False), (rank, True),
                           (rank + 1, False)):
            length = min(segment, total - ((first * per_rank + i) * segment) % span)
            if length <= 0:
                continue
            if out:
                sent += length
                messages_sent += 1
            else:
                received += length
                messages_received += 1
    return Traffic(sent, received, messages_sent, messages_received)


@lru_cache(maxsize=1024)
def gloo_broadcast_traffic(nbytes: int, size: int, rank: int, root: int = 0) -> Traffic:
    """One rank's traffic in ``gloo::broadcast`` of ``nbytes`` from ``root``."""
    virtual = (rank - root) % size
    sends = receives = 0
    bit = 1
    while bit < size:
        if virtual < bit and virtual + bit < size:
            sends += 1
        elif bit <= virtual < 2 * bit:
            receives += 1
        bit <<= 1
    return Traffic(sends * nbytes, receives * nbytes, sends, receives)
