"""Stale synchronous parallel SGD (Ho, Cipar, Cui, Kim, Lee, Gibbons, Gibson, Ganger &
Xing, "More Effective Distributed ML via a Stale Synchronous Parallel Parameter Server",
NIPS 2013): a rank may run ahead of the slowest by at most ``s`` steps.

Deterministic variant over a non-blocking allreduce. At step t every rank starts an
``MPI_Iallreduce`` averaging its fused gradient, and then applies the averaged gradient
of step t - s, waiting for that request only if it has not completed. A rank at step t
thus needs every rank to have started step t - s: no rank leads the slowest by more
than s steps, and the allreduces of the last s steps overlap the computation. Each
in-flight request owns one buffer of a ring of s + 1 fused buffers.

Every rank applies the same averaged gradients in the same order, so all replicas hold
identical parameters after every step (``consistent = True``); what is stale is the
gradient: the one applied at step t was computed on parameters missing the last s
updates. This is the oldest view SSP allows (Ho et al.'s workers also see their own
updates and any newer ones that happen to have arrived; those views depend on timing,
this one does not, so runs are reproducible). With ``staleness=0`` it is synchronous
SGD, step for step ``ConsistentDecentralized``. ``finish_epoch`` drains the requests
still in flight and applies them in order, so an epoch ends with every gradient applied.

MPICH advances a non-blocking collective only inside MPI calls (it has no progress
thread by default), so each step also tests every request in flight once; without that a
request would still be incomplete s steps later however fast the other ranks were.

Measured per epoch: ``updates_applied``; ``staleness_histogram`` ``{updates missing:
count}`` (s for every update but the first s of an epoch, computed while the pipeline
was filling); ``waits_blocked``, the applications whose request had not completed when
it was due and had to be waited for (how often this rank was held back by a slower one,
an upper bound since completion is only noticed at a test); and ``in_flight`` after the
drain (0). The ``communication`` phase is the time spent starting and testing requests
and blocked waiting for them.

Traffic: ``MPI_Iallreduce`` of the n-byte fused gradient per step, modelled as the ring
(2(p-1)/p n per rank each way; Patarasuk & Yuan, JPDC 2009).

``comm_dtype="float16"`` / ``"bfloat16"``: the gradients travel in 16 bits (n is half)
and MPI reduces them with a user-defined operation that sums in float32
(:mod:`~deep500.lv3_distributed.compressed_allreduce`).
"""
from __future__ import annotations

from collections import Counter, deque

import numpy as np

from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer, FusedBuffer
from deep500.utils.errors import Deep500Error


class StaleSynchronous(DistributedOptimizer):
    """Averaged gradients applied ``staleness`` steps after they were computed, over
    non-blocking allreduces (see the module docstring)."""
    #: Why overlap=True is refused (DistributedOptimizer.check_overlap).
    cannot_overlap = (
        "it already hides its allreduce behind the next steps (updates use gradients up"
        " to `staleness` steps old), which changes the algorithm")
    consistent = True

    def __init__(self, base_optimizer, comm=None, staleness: int = 2,
                 comm_dtype: str = "float32",
                 overlap: bool = False):
        super().__init__(base_optimizer, comm, comm_dtype, overlap)
        if isinstance(staleness, bool) or not isinstance(staleness, (int, np.integer)) \
                or staleness < 0:
            raise Deep500Error(f"StaleSynchronous on rank {self.rank}: staleness="
                               f"{staleness!r}; give the number of steps a rank may run "
                               f"ahead of the slowest, an integer >= 0")
        self.staleness = int(staleness)
        self._ring: list[FusedBuffer] = []
        self._in_flight: deque = deque()   # (request, buffer, version computed on)
        self._posted = 0
        self.version = 0                   # averaged gradients applied so far
        self._staleness: Counter = Counter()
        self._blocked = 0

    def scheme_hyperparameters(self) -> dict:
        return {"staleness": self.staleness}

    def step(self, inputs: dict) -> dict:
        self._before_step(inputs)
        outputs, gradients = self.compute_gradients(inputs)
        if not self._ring:
            self._ring = [self.new_fused_buffer()
                          for _ in range(self.staleness + 1)]
        # The s requests in flight hold the other s buffers of the ring.
        fused = self._ring[self._posted % len(self._ring)]
        buffer = fused.pack(gradients)
        with self.phase("communication"):
            request = self.comm.iallreduce(buffer, op="average", out=buffer,
                                           **self.wire_options)
            self._in_flight.append((request, fused, self.version))
            # MPICH advances non-blocking collectives only inside MPI calls: one test
            # of each request per step lets them complete behind the computation.
            for earlier, _, _ in self._in_flight:
                earlier.test()
        self._posted += 1
        if len(self._in_flight) > self.staleness:
            self._apply_oldest()
        return self._finish_step(inputs, outputs)

    def _apply_oldest(self) -> None:
        request, fused, computed_on = self._in_flight.popleft()
        with self.phase("communication"):
            if not request.test():
                self._blocked += 1
                request.wait()
        self._staleness[self.version - computed_on] += 1
        self.apply_gradients(fused.unpack())
        self.version += 1

    def finish_epoch(self) -> None:
        while self._in_flight:
            self._apply_oldest()

    def scheme_measurements(self) -> dict:
        histogram = dict(sorted(self._staleness.items()))
        return {"updates_applied": sum(histogram.values()),
                "staleness_histogram": histogram, "waits_blocked": self._blocked,
                "in_flight": len(self._in_flight)}

    def end_epoch(self) -> dict:
        measured = super().end_epoch()
        self._staleness = Counter()
        self._blocked = 0
        return measured

    def analytic_traffic(self, steps: int) -> dict:
        return self.ring_allreduce_traffic(
            steps, "the gradients by MPI_Iallreduce every step, modelled as the ring")
