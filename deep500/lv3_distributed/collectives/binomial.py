"""The binomial-tree allreduce: a binomial-tree reduce to rank 0, then the
binomial-tree broadcast down the same tree (R. Thakur, R. Rabenseifner, W. Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005,
sections 4.1-4.2). Relative rank v receives from v + 2^k for every 2^k below its lowest
set bit, then sends to v with that bit cleared.

It can also narrow the wire (``run_narrowed``): each rank sends its partial sum up the
tree as a :class:`~deep500.lv3_distributed.wire_dtype.WireType` and adds what its
children sent, widened, at the buffer's precision; rank 0 narrows the result once, the
broadcast passes that on, and every rank (rank 0 too) widens it.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm, flat_result
from deep500.lv3_distributed.collectives.messages import Counter, recv, send
from deep500.lv3_distributed.collectives.pricing import lg, shared, step
from deep500.lv3_distributed.message_tags import (BINOMIAL_BROADCAST, BINOMIAL_REDUCE,
                                                  NARROWED_BINOMIAL_BROADCAST,
                                                  NARROWED_BINOMIAL_REDUCE)
from deep500.lv3_distributed.volume import Traffic, binomial_children


class Binomial(AllreduceAlgorithm):
    """Binomial-tree reduce to rank 0, then binomial-tree broadcast from it."""
    name = "binomial"
    narrows_on_wire = True

    def _run(self, net, target, ufunc, average) -> Traffic:
        p, r, counter = net.size, net.rank, Counter()
        scratch = net._scratch_for(target.dtype, target.size)
        mask = 1
        while mask < p:
            if r & mask:
                send(net, target, r - mask, BINOMIAL_REDUCE, counter)
                break
            if r + mask < p:
                recv(net, scratch, r + mask, BINOMIAL_REDUCE, counter)
                ufunc(target, scratch, out=target)
            mask <<= 1
        if r == 0 and average:
            np.true_divide(target, p, out=target)
        _broadcast_down(net, target, BINOMIAL_BROADCAST, counter)
        return counter.traffic()

    def run_narrowed(self, net, array, out, reduction, wire) -> Traffic:
        """``_run`` with the values narrowed to ``wire`` on the way (module docstring).
        Bytes: the full-width algorithm's with the wire's itemsize."""
        target = flat_result(array, out)
        p, r, counter = net.size, net.rank, Counter()
        narrowed, incoming = wire.empty(target.size), wire.empty(target.size)
        widened = np.empty_like(target)
        mask = 1
        while mask < p:
            if r & mask:
                send(net, wire.encode(target, narrowed), r - mask, NARROWED_BINOMIAL_REDUCE,
                     counter)
                break
            if r + mask < p:
                recv(net, incoming, r + mask, NARROWED_BINOMIAL_REDUCE, counter)
                reduction.ufunc(target, wire.decode(incoming, widened), out=target)
            mask <<= 1
        if r == 0:
            if reduction.average:
                np.true_divide(target, p, out=target)
            wire.encode(target, narrowed)
        _broadcast_down(net, narrowed, NARROWED_BINOMIAL_BROADCAST, counter)
        wire.decode(narrowed, target)
        return counter.traffic()

    def _traffic(self, count, itemsize, size, rank) -> Traffic:
        """A rank with c children in the tree receives c messages of n bytes and sends
        one to its parent, then receives one from the parent and sends c; rank 0
        (c = ceil(log2 p)) only the c each way."""
        n = count * itemsize
        messages = len(binomial_children(rank, size)) + (1 if rank else 0)
        return Traffic(messages * n, messages * n, messages, messages)

    def _cost(self, m, n, p) -> float:
        """T = 2⌈lg p⌉(α + nβ) + ⌈lg p⌉nγ + ⌈lg p⌉nδ_receive: each rank down the
        broadcast's path receives into the buffer its parent read in the reduce (plus
        nδ_sum for the first sums when ``repeated``)."""
        return lg(p) * (step(m, n, reduce=True) + step(m, n) + shared(m, n, "receive")) \
            + shared(m, n, "sum", False)


def _broadcast_down(net, buffer, tag: int, counter: Counter) -> None:
    """The binomial-tree broadcast of rank 0's ``buffer``: relative rank v receives from
    v with its lowest set bit cleared, then sends to v + 2^k for every 2^k below it."""
    p, r = net.size, net.rank
    mask = 1
    while mask < p:
        if r & mask:
            recv(net, buffer, r - mask, tag, counter)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if r + mask < p:
            send(net, buffer, r + mask, tag, counter)
        mask >>= 1


BINOMIAL = Binomial()
