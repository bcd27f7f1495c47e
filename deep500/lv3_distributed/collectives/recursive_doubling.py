"""Recursive doubling (R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), 2005, section 4.4): log2 p' steps; at
step k the ranks whose (new) ranks differ in bit k exchange their whole buffers and both
reduce. Non-power-of-two p: the fold of ``collectives.fold``.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm
from deep500.lv3_distributed.collectives.fold import (fold_cost, old_rank, run_folded,
                                                      with_fold)
from deep500.lv3_distributed.collectives.messages import sendrecv
from deep500.lv3_distributed.collectives.pricing import lg, pof2, shared, swap
from deep500.lv3_distributed.message_tags import EXCHANGE
from deep500.lv3_distributed.volume import Traffic


class RecursiveDoubling(AllreduceAlgorithm):
    """log2 p' exchanges of the whole buffer, after the fold of non-power-of-two p."""
    name = "recursive_doubling"

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
