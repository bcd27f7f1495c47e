"""Recursive doubling (R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), 2005, section 4.4): log2 p' steps; at
step k the ranks whose (new) ranks differ in bit k exchange their whole buffers and both
reduce. Non-power-of-two p: the fold of ``collectives.fold``.

It can also narrow the wire (``run_narrowed``): each exchange sends the partial sum as a
:class:`~deep500.lv3_distributed.wire_dtype.WireType` (2 bytes a value) and both
partners add the two values as they travelled, widened, at the buffer's precision;
so both hold the same bits after every step, and every rank ends with the same result.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm, flat_result
from deep500.lv3_distributed.collectives.fold import (fold_cost, fold_partner, old_rank,
                                                      run_folded, with_fold)
from deep500.lv3_distributed.collectives.messages import Counter, recv, send, sendrecv
from deep500.lv3_distributed.collectives.pricing import lg, pof2, shared, swap
from deep500.lv3_distributed.message_tags import (EXCHANGE, NARROWED_EXCHANGE,
                                                  NARROWED_FOLD, NARROWED_UNFOLD)
from deep500.lv3_distributed.volume import Traffic


class RecursiveDoubling(AllreduceAlgorithm):
    """log2 p' exchanges of the whole buffer, after the fold of non-power-of-two p."""
    name = "recursive_doubling"
    narrows_on_wire = True

    def _run(self, net, target, ufunc, average) -> Traffic:
        def exchanges(new_rank, counter):
            q = pof2(net.size)
            scratch = net._scratch_for(target.dtype, target.size)
            mask = 1
            while mask < q:
                peer = old_rank(new_rank ^ mask, net.size)
                sendrecv(net, target, scratch, peer, EXCHANGE, counter)
                ufunc(target, scratch, out=target)
                mask <<= 1
            if average:
                np.true_divide(target, net.size, out=target)
        return run_folded(net, target, ufunc, exchanges)

    def run_narrowed(self, net, array, out, reduction, wire) -> Traffic:
        """The fold, log2 p' exchanges and the unfold with the values narrowed to
        ``wire``. Before each exchange a rank narrows its partial sum (the message) and
        keeps that rounding of it too, then adds what arrived, widened: both partners
        form the same sum of the same two rounded values. The average is divided at
        the end, the result narrowed once (what the unfold sends) and widened again on
        every rank. Bytes: the full-width algorithm's with the wire's itemsize."""
        target = flat_result(array, out)
        narrowed, incoming = wire.empty(target.size), wire.empty(target.size)
        widened = np.empty(target.size, target.dtype)
        counter = Counter()

        def as_sent():  # this rank's values as the peer receives them
            wire.decode(wire.encode(target, narrowed), target)

        def add_arrived():
            reduction.ufunc(target, wire.decode(incoming, widened), out=target)

        partner, new_rank = fold_partner(net.size, net.rank)
        if partner is not None and new_rank < 0:
            send(net, wire.encode(target, narrowed), partner, NARROWED_FOLD, counter)
        elif partner is not None:
            recv(net, incoming, partner, NARROWED_FOLD, counter)
            as_sent()
            add_arrived()
        if new_rank >= 0:
            mask, q = 1, pof2(net.size)
            while mask < q:
                peer = old_rank(new_rank ^ mask, net.size)
                as_sent()
                sendrecv(net, narrowed, incoming, peer, NARROWED_EXCHANGE, counter)
                add_arrived()
                mask <<= 1
            if reduction.average:
                np.true_divide(target, net.size, out=target)
            as_sent()
        if partner is not None and new_rank < 0:
            recv(net, incoming, partner, NARROWED_UNFOLD, counter)
            wire.decode(incoming, target)
        elif partner is not None:
            send(net, narrowed, partner, NARROWED_UNFOLD, counter)
        return counter.traffic()

    @lru_cache(maxsize=4096)  # MPI's modelled calls ask for it on every call
    def _traffic(self, count, itemsize, size, rank) -> Traffic:
        """log2 p' exchanges of the whole n bytes each way, plus the fold's."""
        n = count * itemsize
        steps = pof2(size).bit_length() - 1
        return with_fold(size, rank, n, Traffic(steps * n, steps * n, steps, steps))

    def _cost(self, m, n, p) -> float:
        """T = lg p'(α + nβ + nγ + nδ_sum), plus the fold for p ≠ p': each step sums
        into the buffer it has just sent."""
        return lg(pof2(p)) * (swap(m, n, reduce=True) + shared(m, n, "sum")) \
            + fold_cost(m, n, p)


RECURSIVE_DOUBLING = RecursiveDoubling()
