"""Rabenseifner's allreduce (R. Rabenseifner, "Optimization of collective reduction
operations", ICCS 2004; R. Thakur, R. Rabenseifner, W. Gropp, IJHPCA 2005, section 4.4):
a reduce-scatter by recursive halving (step k exchanges half of the range held, keeping
the half whose index matches bit k of the new rank), then an allgather by recursive
doubling, the same steps reversed. The n elements are cut into p' blocks as
``volume.ring_chunks``; a rank ends the reduce-scatter owning one block (bit-reversed
order, as MPICH). Non-power-of-two p: the fold of ``collectives.fold``.

It can also narrow the wire (``run_narrowed``): every half sent in the reduce-scatter
travels as a :class:`~deep500.lv3_distributed.wire_dtype.WireType` and is added,
widened, to the receiver's own half at the buffer's precision; each rank narrows the
block it ends up owning once, the allgather passes the narrowed blocks, and every rank
widens the same narrowed result.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm, flat_result
from deep500.lv3_distributed.collectives.fold import (fold_cost, fold_partner, old_rank,
                                                      run_folded, with_fold)
from deep500.lv3_distributed.collectives.messages import (Counter, chunk_bounds, recv,
                                                          send, sendrecv)
from deep500.lv3_distributed.collectives.pricing import lg, pof2, shared, swap
from deep500.lv3_distributed.message_tags import (DOUBLING, HALVING, NARROWED_DOUBLING,
                                                  NARROWED_FOLD, NARROWED_HALVING,
                                                  NARROWED_UNFOLD)
from deep500.lv3_distributed.volume import Traffic, ring_chunks


def _halves(lo: int, hi: int, upper: int) -> tuple:
    """(kept, given) halves of the block range [lo, hi): the lower half is kept when
    this rank's bit of the step is 0 (``upper`` false), the upper one otherwise."""
    mid = (lo + hi) // 2
    return ((lo, mid), (mid, hi)) if not upper else ((mid, hi), (lo, mid))


class Rabenseifner(AllreduceAlgorithm):
    """Recursive-halving reduce-scatter, then recursive-doubling allgather, on p'
    blocks, after the fold of non-power-of-two p."""
    name = "rabenseifner"
    narrows_on_wire = True

    def _run(self, net, target, ufunc, average) -> Traffic:
        def halving_then_doubling(new_rank, counter):
            q = pof2(net.size)
            bounds = chunk_bounds(target.size, q)
            scratch = net._scratch_for(target.dtype, bounds[(q + 1) // 2])
            lo, hi, mask, steps = 0, q, 1, []
            while mask < q:
                peer = old_rank(new_rank ^ mask, net.size)
                keep, give = _halves(lo, hi, new_rank & mask)
                k0, k1 = bounds[keep[0]], bounds[keep[1]]
                incoming = scratch[:k1 - k0]
                sendrecv(net, target[bounds[give[0]]:bounds[give[1]]], incoming, peer,
                         HALVING, counter)
                ufunc(target[k0:k1], incoming, out=target[k0:k1])
                steps.append((peer, keep, give))
                lo, hi = keep
                mask <<= 1
            if average:
                owned = target[bounds[lo]:bounds[hi]]
                np.true_divide(owned, net.size, out=owned)
            for peer, keep, give in reversed(steps):
                sendrecv(net, target[bounds[keep[0]]:bounds[keep[1]]],
                         target[bounds[give[0]]:bounds[give[1]]], peer, DOUBLING,
                         counter)
        return run_folded(net, target, ufunc, halving_then_doubling)

    def run_narrowed(self, net, array, out, reduction, wire) -> Traffic:
        """``_run`` with the values narrowed to ``wire`` on the way (module docstring),
        the fold's and unfold's messages included. Bytes: the full-width algorithm's
        with the wire's itemsize."""
        target = flat_result(array, out)
        narrowed, incoming = wire.empty(target.size), wire.empty(target.size)
        widened = np.empty_like(target)
        counter = Counter()
        partner, new_rank = fold_partner(net.size, net.rank)
        if partner is not None and new_rank < 0:
            send(net, wire.encode(target, narrowed), partner, NARROWED_FOLD, counter)
        elif partner is not None:
            recv(net, incoming, partner, NARROWED_FOLD, counter)
            reduction.ufunc(target, wire.decode(incoming, widened), out=target)
        if new_rank >= 0:
            self._narrowed_halving_doubling(net, target, narrowed, incoming, widened,
                                            new_rank, reduction, wire, counter)
        if partner is not None and new_rank < 0:
            recv(net, narrowed, partner, NARROWED_UNFOLD, counter)
        elif partner is not None:
            send(net, narrowed, partner, NARROWED_UNFOLD, counter)
        wire.decode(narrowed, target)
        return counter.traffic()

    @staticmethod
    def _narrowed_halving_doubling(net, target, narrowed, incoming, widened, new_rank,
                                   reduction, wire, counter) -> None:
        """The p' ranks' part: halving with narrowed halves, this rank's block divided
        and narrowed into ``narrowed``, doubling of the narrowed blocks."""
        q = pof2(net.size)
        bounds = chunk_bounds(target.size, q)
        lo, hi, mask, steps = 0, q, 1, []
        while mask < q:
            peer = old_rank(new_rank ^ mask, net.size)
            keep, give = _halves(lo, hi, new_rank & mask)
            k0, k1, g0, g1 = (bounds[keep[0]], bounds[keep[1]], bounds[give[0]],
                              bounds[give[1]])
            arrived = incoming[:k1 - k0]
            sendrecv(net, wire.encode(target[g0:g1], narrowed[g0:g1]), arrived, peer,
                     NARROWED_HALVING, counter)
            reduction.ufunc(target[k0:k1], wire.decode(arrived, widened[:k1 - k0]),
                            out=target[k0:k1])
            steps.append((peer, keep, give))
            lo, hi = keep
            mask <<= 1
        owned = target[bounds[lo]:bounds[hi]]
        if reduction.average:
            np.true_divide(owned, net.size, out=owned)
        wire.encode(owned, narrowed[bounds[lo]:bounds[hi]])
        for peer, keep, give in reversed(steps):
            sendrecv(net, narrowed[bounds[keep[0]]:bounds[keep[1]]],
                     narrowed[bounds[give[0]]:bounds[give[1]]], peer, NARROWED_DOUBLING,
                     counter)

    @lru_cache(maxsize=4096)  # MPI's modelled calls ask for it on every call
    def _traffic(self, count, itemsize, size, rank) -> Traffic:
        """Reduce-scatter step k sends the half of the block range R_k held that the
        partner keeps and receives the other half, the allgather repeats the steps in
        reverse with the halves swapped, so each step moves |R_k| elements each way over
        both phases::

            bytes sent = bytes received = itemsize * sum_{k < log2 p'} |R_k|,
            R_0 = all blocks, R_{k+1} = the half of R_k picked by bit k of the new rank
            messages = 2 log2 p' each way

        which is 2(p'-1)/p' n bytes when p' divides the elements; plus the fold's."""
        n = count * itemsize
        _, new_rank = fold_partner(size, rank)
        q = pof2(size)
        if new_rank < 0:
            return Traffic(n, n, 1, 1)
        chunks = ring_chunks(count, q)
        lo, hi, mask, moved, steps = 0, q, 1, 0, 0
        while mask < q:
            moved += sum(chunks[lo:hi])
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if not new_rank & mask else (mid, hi)
            mask <<= 1
            steps += 2
        return with_fold(size, rank, n, Traffic(moved * itemsize, moved * itemsize, steps,
                                                 steps))

    def _cost(self, m, n, p) -> float:
        """Step k moves n/2^k bytes. T = 2 lg p' α + 2(p'-1)/p' nβ + (p'-1)/p' nγ
        + (p'-1)/p' nδ_receive, plus the fold for p ≠ p': the allgather receives each
        half into the range it sent in the reduce-scatter (the reduce-scatter's sums pay
        δ_sum when ``repeated``)."""
        t = sum(swap(m, n / 2 ** k, reduce=True) + shared(m, n / 2 ** k, "sum", False)
                + swap(m, n / 2 ** k) + shared(m, n / 2 ** k, "receive")
                for k in range(1, lg(pof2(p)) + 1))
        return t + fold_cost(m, n, p)


RABENSEIFNER = Rabenseifner()
