"""The linear allreduce, the naive algorithm of R. Thakur, R. Rabenseifner, W. Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005:
every rank sends its buffer to rank 0, which receives them in rank order and reduces;
rank 0 then sends the result to every rank (a linear broadcast).

It can also narrow the wire (``run_narrowed``): every rank sends its values as a
:class:`~deep500.lv3_distributed.wire_dtype.WireType`; rank 0 adds them, widened, to its
own at the buffer's precision, narrows the result once and sends that; every rank
(rank 0 too) widens the same narrowed result.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm, flat_result
from deep500.lv3_distributed.collectives.messages import Counter, recv, send
from deep500.lv3_distributed.collectives.pricing import shared, step
from deep500.lv3_distributed.message_tags import (LINEAR_BROADCAST, LINEAR_REDUCE,
                                                  NARROWED_LINEAR_BROADCAST,
                                                  NARROWED_LINEAR_REDUCE)
from deep500.lv3_distributed.volume import Traffic


class Linear(AllreduceAlgorithm):
    """Reduce at rank 0 (p - 1 receives in rank order), then a linear broadcast."""
    name = "linear"
    narrows_on_wire = True

    def _run(self, net, target, ufunc, average) -> Traffic:
        p, r, counter = net.size, net.rank, Counter()
        if r != 0:
            send(net, target, 0, LINEAR_REDUCE, counter)
            recv(net, target, 0, LINEAR_BROADCAST, counter)
            return counter.traffic()
        scratch = net._scratch_for(target.dtype, target.size)
        for source in range(1, p):
            recv(net, scratch, source, LINEAR_REDUCE, counter)
            ufunc(target, scratch, out=target)
        if average:
            np.true_divide(target, p, out=target)
        for dest in range(1, p):
            send(net, target, dest, LINEAR_BROADCAST, counter)
        return counter.traffic()

    def run_narrowed(self, net, array, out, reduction, wire) -> Traffic:
        """``_run`` with the values narrowed to ``wire`` on the way (module docstring).
        Bytes: the full-width algorithm's with the wire's itemsize."""
        target = flat_result(array, out)
        p, r, counter = net.size, net.rank, Counter()
        narrowed = wire.empty(target.size)
        if r != 0:
            send(net, wire.encode(target, narrowed), 0, NARROWED_LINEAR_REDUCE, counter)
            recv(net, narrowed, 0, NARROWED_LINEAR_BROADCAST, counter)
            wire.decode(narrowed, target)
            return counter.traffic()
        incoming, widened = wire.empty(target.size), np.empty_like(target)
        for source in range(1, p):
            recv(net, incoming, source, NARROWED_LINEAR_REDUCE, counter)
            reduction.ufunc(target, wire.decode(incoming, widened), out=target)
        if reduction.average:
            np.true_divide(target, p, out=target)
        wire.encode(target, narrowed)
        for dest in range(1, p):
            send(net, narrowed, dest, NARROWED_LINEAR_BROADCAST, counter)
        wire.decode(narrowed, target)
        return counter.traffic()

    def _traffic(self, count, itemsize, size, rank) -> Traffic:
        """Rank 0 sends and receives (p - 1) messages of n bytes, every other rank one
        each way."""
        n = count * itemsize
        if rank == 0:
            return Traffic((size - 1) * n, (size - 1) * n, size - 1, size - 1)
        return Traffic(n, n, 1, 1)

    def _cost(self, m, n, p) -> float:
        """The root receives and sums p - 1 messages, then sends p - 1.
        T = 2(p-1)α + 2(p-1)nβ + (p-1)nγ + nδ_receive: the last rank receives the
        result into the buffer the root read (plus nδ_sum for the root's first sum when
        ``repeated``)."""
        return (p - 1) * (step(m, n, reduce=True) + step(m, n)) \
            + shared(m, n, "sum", False) + shared(m, n, "receive")


LINEAR = Linear()
