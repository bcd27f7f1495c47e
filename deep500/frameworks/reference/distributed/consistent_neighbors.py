"""Neighbour-based decentralised SGD: each rank averages with its neighbours on a ring
or a 2-D torus instead of with everyone (Lian et al., "Can Decentralized Algorithms
Outperform Centralized Algorithms? A Case Study for Decentralized Parallel Stochastic
Gradient Descent", NeurIPS 2017; Ben-Nun & Hoefler, ACM CSUR 2019, Section 7.3).

``mix="gradients"`` (the default) averages the gradient over the rank's neighbourhood
(itself and its distinct neighbours) and applies the base update rule to it.
``mix="parameters"`` is D-PSGD as written by Lian et al.: the parameters are averaged
over the neighbourhood, then the rank's own gradient (computed at its parameters
before mixing) is applied: ``x_i <- mean_{j in N(i)} x_j - lr * grad f_i(x_i)``.

Traffic per step does not grow with the number of ranks: on a ring, two ``Sendrecv`` of
n bytes (to the right and to the left); on a torus, four. When the neighbourhood is
every rank (a ring of 2 or 3 ranks, a 2 x 2 torus) every rank averages the same set and
gradient mixing is consistent (``consistent`` says so per instance); otherwise
information travels one hop per step and the replicas differ. Parameter mixing is never
consistent: each rank applies its own gradient after mixing.

``comm_dtype="float16"`` / ``"bfloat16"``: the buffer is narrowed once and sent in 16
bits (half the bytes); every contribution to the mean, this rank's own included, is the
narrowed value widened, and the mean is formed in float32, so ranks that average the
same set still agree bit for bit.

``overlap=True`` (``mix="gradients"``, float32 on the wire): each gradient bucket is
exchanged with the neighbours as soon as backprop completes it
(:class:`~deep500.lv3_distributed.bucket_requests.NeighbourMeanRequest`, started by
``GradientBuckets``): the same messages and the same mean, bit for bit, as the
blocking step. Parameter mixing exchanges the parameters, which backprop does not
produce, and is refused with ``overlap=True``.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.bucket_requests import (NeighbourMeanRequest,
                                                     neighbour_directions)
from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer
from deep500.lv3_distributed.gradient_buckets import DEFAULT_BUCKET_BYTES
from deep500.lv3_distributed.option_checks import check_choice
from deep500.utils.errors import Deep500Error

TOPOLOGIES = ("ring", "torus")
MIXES = ("gradients", "parameters")


class ConsistentNeighbors(DistributedOptimizer):
    """Average gradients (or parameters) with the ring or torus neighbours;
    ``overlap``, ``bucket_bytes``, ``compute_only_every``, ``progress``: see
    :class:`d5.DistributedOptimizer` (gradient mixing in float32 only)."""

    def __init__(self, base_optimizer, comm=None, topology: str = "ring",
                 mix: str = "gradients", comm_dtype: str = "float32",
                 overlap: bool = False, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 compute_only_every: int = 10, progress: str = "calls"):
        type(self).check_options(topology, mix, comm_dtype, overlap, bucket_bytes,
                                 progress)
        super().__init__(base_optimizer, comm, comm_dtype, overlap, bucket_bytes,
                         compute_only_every, progress)
        self.topology, self.mix = topology, mix
        self.neighbours = self.neighbourhood(self.rank)
        self.consistent = mix == "gradients" and all(
            len(self.neighbourhood(r)) == self.size for r in range(self.size))

    @classmethod
    def check_options(cls, topology: str = "ring", mix: str = "gradients",
                      comm_dtype: str = "float32", overlap: bool = False,
                      bucket_bytes: int = DEFAULT_BUCKET_BYTES, progress: str = "calls",
                      **_options) -> None:
        """The constructor's checks that need no MPI (a recipe calls this up front)."""
        check_choice("ConsistentNeighbors", "topology", topology, TOPOLOGIES)
        check_choice("ConsistentNeighbors", "mix", mix, MIXES)
        super().check_options(comm_dtype, overlap, bucket_bytes, progress)
        if overlap and mix == "parameters":
            raise Deep500Error("ConsistentNeighbors: overlap=True exchanges each gradient "
                               "bucket as backprop completes it; mix='parameters' "
                               "exchanges the parameters instead, which backprop does not "
                               "produce. Use mix='gradients' or overlap=False")
        if overlap and comm_dtype != "float32":
            raise Deep500Error(f"ConsistentNeighbors: overlap=True sends the buckets in "
                               f"float32; comm_dtype={comm_dtype!r} needs overlap=False")

    def bucket_exchange(self, comm, buffer: np.ndarray):
        """An overlapped bucket: its mean over the neighbourhood, non-blocking."""
        operation = f"{self.topology}_exchange"
        return comm.timed("neighbour exchange", lambda: NeighbourMeanRequest(
            self.comm, buffer, neighbour_directions(self.comm, self.topology),
            self.neighbours, operation))

    def neighbourhood(self, rank: int) -> list[int]:
        """The distinct ranks ``rank`` averages over, itself included."""
        if self.topology == "ring":
            near = [(rank - 1) % self.size, (rank + 1) % self.size]
        else:
            near = list(self.comm.torus_neighbours(rank).values())
        return sorted({rank, *near})

    def scheme_hyperparameters(self) -> dict:
        return {"topology": self.topology, "mix": self.mix}

    def _exchange(self, buffer: np.ndarray) -> dict[int, np.ndarray]:
        """``{rank: its buffer}`` for every rank of the neighbourhood."""
        if self.topology == "ring":
            left, right = self.comm.ring_exchange(buffer)
            got = {(self.rank - 1) % self.size: left, (self.rank + 1) % self.size: right}
        else:
            arrays = self.comm.torus_exchange(buffer)
            got = {self.comm.torus_neighbours()[d]: a for d, a in arrays.items()}
        got[self.rank] = buffer
        return got

    def _neighbourhood_mean(self, buffer: np.ndarray) -> np.ndarray:
        wire = self.wire
        with self.phase("communication"):
            if wire is None:
                got = self._exchange(buffer)
            else:
                got = {rank: wire.decode(narrowed, np.empty_like(buffer))
                       for rank, narrowed in self._exchange(wire.encode(buffer)).items()}
        mean = np.zeros_like(buffer)
        for rank in self.neighbours:  # a fixed order: the same sum on every rank
            mean += got[rank]
        mean /= len(self.neighbours)
        return mean

    def step(self, inputs: dict) -> dict:
        if self.overlap:
            return self._overlapped_step(inputs)
        self._before_step(inputs)
        outputs, gradients = self.compute_gradients(inputs)
        fused = self.fused()
        if self.mix == "gradients":
            mean = self._neighbourhood_mean(fused.pack(gradients))
            self.apply_gradients(fused.unpack(mean))
        else:
            mean = self._neighbourhood_mean(fused.pack(self.fetch_parameters()))
            with self.phase("update"):
                self.feed_parameters(fused.unpack(mean))
            self.apply_gradients(gradients)
        return self._finish_step(inputs, outputs)

    def analytic_traffic(self, steps: int) -> dict:
        n = self.wire_nbytes(self.fused().buffer)
        if self.size == 1:
            messages = 0
        elif self.topology == "ring":
            messages = 2
        else:
            rows, cols = self.comm.grid
            messages = (2 if rows > 1 else 0) + (2 if cols > 1 else 0)
        return {"bytes_sent": steps * messages * n, "bytes_received": steps * messages * n,
                "model": f"{messages} Sendrecv of {n} B per step with the "
                         f"{self.topology} neighbours"}
