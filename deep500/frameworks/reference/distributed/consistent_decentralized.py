"""Data-parallel SGD: every rank computes the gradient of its local minibatch, the
gradients are averaged by an allreduce, and every rank applies the same update.

With ``p`` ranks of local batch ``b`` drawing shards of one permutation
(``d5.DistributedSampler``) and a loss that is the mean over the minibatch, the averaged
gradient is the gradient of the global minibatch of ``p*b`` samples, so after ``k``
steps the parameters equal those of one process with batch ``p*b`` (Theorem 1 of
synchronous SGD; Ben-Nun & Hoefler, "Demystifying Parallel and Distributed Deep
Learning", ACM CSUR 2019, Section 7.1) up to floating-point summation order. The ring
allreduce reduces each chunk once and copies it, so every rank holds bit-identical
parameters after every step.
"""
from __future__ import annotations

from deep500.lv3_distributed.communication import ALLREDUCE_ALGORITHMS
from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer
from deep500.utils.errors import Deep500Error


class ConsistentDecentralized(DistributedOptimizer):
    """Allreduce-average the fused gradients each step, then update on every rank (the
    step of :class:`d5.DistributedOptimizer`, with the allreduce chosen here).

    ``algorithm``: the allreduce of :class:`d5.CommunicationNetwork` (``"ring"``,
    Deep500's own, counted exactly; ``"mpi"``, MPI's, counted by the ring model)."""

    def __init__(self, base_optimizer, comm=None, algorithm: str = "ring"):
        super().__init__(base_optimizer, comm)
        if algorithm not in ALLREDUCE_ALGORITHMS:
            raise Deep500Error(f"ConsistentDecentralized: algorithm={algorithm!r}; choose "
                               f"one of {', '.join(ALLREDUCE_ALGORITHMS)}")
        self.allreduce_algorithm = algorithm

    @property
    def algorithm(self) -> str:
        return self.allreduce_algorithm

    def scheme_hyperparameters(self) -> dict:
        return {"allreduce": self.allreduce_algorithm}
