"""The ring allreduce, Deep500's default (P. Patarasuk, X. Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations", JPDC 69(2), 2009): a reduce-scatter
of p - 1 ``Sendrecv`` steps, then an allgather of p - 1 steps, on p chunks of the
flattened buffer that differ by at most one element; any p, any element count.

Its traffic is the lower bound of any allreduce, 2(p-1)/p · n bytes each way; the closed
form is ``volume.ring_allreduce_traffic``, which also models MPI's non-blocking
allreduce, Gloo's ring and the C++ allreduce. On a 2-core VM (2 ranks, MPICH 5.0) the
ring took 0.77-0.94x the time of ``MPI_Allreduce`` from 256 KB to 16 MB and 0.39x at
64 MB; below 64 KB its two Python-driven steps cost more (about 13 us against 5 us at
1 KB); see ``benchmarks/lv3_allreduce.py``.

It can also narrow the wire (``run_narrowed``): the values travel as a
:class:`~deep500.lv3_distributed.wire_dtype.WireType` (2 bytes each) and every
reduction widens what it received first, so sums are formed at the buffer's precision.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm
from deep500.lv3_distributed.collectives.messages import (chunk_bounds, ring_allgather,
                                                          ring_exchange)
from deep500.lv3_distributed.collectives.pricing import shared, swap
from deep500.lv3_distributed.message_tags import (NARROWED_ALLGATHER,
                                                  NARROWED_REDUCE_SCATTER,
                                                  RING_ALLGATHER, RING_REDUCE_SCATTER)
from deep500.lv3_distributed.volume import (Traffic, ring_allreduce_message_sizes,
                                            ring_allreduce_traffic)


class Ring(AllreduceAlgorithm):
    """Reduce-scatter then allgather around the ring (module docstring)."""
    name = "ring"
    narrows_on_wire = True
    non_blocking = True   # CommunicationNetwork.iallreduce: collectives.ring_request

    def run(self, net, array, out, reduction, **options) -> Traffic:
        """Reduce-scatter step s sends chunk (r - s) to the right and reduces chunk
        (r - s - 1) received from the left into ``out`` (reading this rank's own part
        from ``array``, so no copy is needed out of place); after p - 1 steps rank r
        holds chunk (r + 1) fully reduced (divided by p here for the average, on n/p
        elements instead of n). Then ``messages.ring_allgather`` passes the chunks on
        into ``out``."""
        p, r = net.size, net.rank
        source, target = array.reshape(-1), out.reshape(-1)
        bounds = chunk_bounds(source.size, p)
        right, left = (r + 1) % p, (r - 1) % p
        scratch = net._scratch_for(array.dtype, bounds[1] - bounds[0])  # the largest chunk
        sent = received = 0
        for step in range(p - 1):
            send_chunk, recv_chunk = (r - step) % p, (r - step - 1) % p
            outgoing = (source if step == 0 else target)[
                bounds[send_chunk]:bounds[send_chunk + 1]]
            lo, hi = bounds[recv_chunk], bounds[recv_chunk + 1]
            incoming = scratch[:hi - lo]
            ring_exchange(net, outgoing, incoming, right, left, RING_REDUCE_SCATTER)
            reduction.ufunc(source[lo:hi], incoming, out=target[lo:hi])
            sent += outgoing.nbytes
            received += incoming.nbytes
        if reduction.average:
            owned = (r + 1) % p
            chunk = target[bounds[owned]:bounds[owned + 1]]
            np.true_divide(chunk, p, out=chunk)
        more_sent, more_received = ring_allgather(net, target, bounds, RING_ALLGATHER)
        return Traffic(sent + more_sent, received + more_received, 2 * (p - 1),
                       2 * (p - 1))

    def run_narrowed(self, net, array, out, reduction, wire) -> Traffic:
        """Reduce-scatter step s narrows chunk (r - s) (this rank's own values at step
        0, afterwards the partial sum it has just formed), sends it to the right, and
        adds the chunk received from the left, widened, to this rank's own values of
        that chunk. The owner of a fully reduced chunk divides it (average), narrows it
        once, and the allgather passes the narrowed chunks around; at the end every rank
        widens the whole narrowed result, its own chunk included, so all ranks hold
        bit-identical values. Bytes: those of the full-width ring with the wire's
        itemsize."""
        p, r = net.size, net.rank
        source, target = array.reshape(-1), out.reshape(-1)
        bounds = chunk_bounds(source.size, p)
        right, left = (r + 1) % p, (r - 1) % p
        largest = bounds[1] - bounds[0]
        narrowed = wire.empty(source.size)             # the buffer as it travels
        incoming = wire.empty(largest)
        widened = np.empty(largest, target.dtype)
        sent = received = 0
        for step in range(p - 1):
            send_chunk, recv_chunk = (r - step) % p, (r - step - 1) % p
            a, b = bounds[send_chunk], bounds[send_chunk + 1]
            outgoing = wire.encode((source if step == 0 else target)[a:b], narrowed[a:b])
            lo, hi = bounds[recv_chunk], bounds[recv_chunk + 1]
            arrived = incoming[:hi - lo]
            ring_exchange(net, outgoing, arrived, right, left, NARROWED_REDUCE_SCATTER)
            reduction.ufunc(source[lo:hi], wire.decode(arrived, widened[:hi - lo]),
                            out=target[lo:hi])
            sent += outgoing.nbytes
            received += arrived.nbytes
        owned = (r + 1) % p
        lo, hi = bounds[owned], bounds[owned + 1]
        if reduction.average:
            np.true_divide(target[lo:hi], p, out=target[lo:hi])
        wire.encode(target[lo:hi], narrowed[lo:hi])
        more_sent, more_received = ring_allgather(net, narrowed, bounds,
                                                  NARROWED_ALLGATHER)
        wire.decode(narrowed, target)
        return Traffic(sent + more_sent, received + more_received, 2 * (p - 1),
                       2 * (p - 1))

    def _traffic(self, count, itemsize, size, rank) -> Traffic:
        return ring_allreduce_traffic(count, itemsize, size, rank)

    def message_sizes(self, count, itemsize, size, rank, **options):
        """The chunks of ``ring_allreduce_message_sizes``."""
        return ring_allreduce_message_sizes(count, itemsize, size, rank)

    def _cost(self, m, n, p) -> float:
        """p - 1 reduce-scatter steps and p - 1 allgather steps on chunks of n/p
        (Patarasuk & Yuan 2009; Chan et al. 2007). T = 2(p-1)α + 2(p-1)/p nβ
        + (p-1)/p nγ + (p-1)/p nδ_receive: each allgather step receives into the chunk
        this rank sent in the reduce-scatter (the reduce-scatter's sums pay δ_sum when
        ``repeated``)."""
        c = n / p
        return (p - 1) * (swap(m, c, reduce=True) + shared(m, c, "sum", False)
                          + swap(m, c) + shared(m, c, "receive"))


RING = Ring()
