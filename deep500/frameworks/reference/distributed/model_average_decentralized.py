"""Model averaging: every rank takes local steps with its own optimizer, and every
``period`` steps the ranks average their parameters with an allreduce (local SGD;
Zhang et al., "Parallel SGD: When does averaging help?", 2016; Lin et al., "Don't Use
Large Mini-Batches, Use Local SGD", ICLR 2020; Ben-Nun & Hoefler, ACM CSUR 2019,
Section 7.4).

``comm_dtype="float16"`` / ``"bfloat16"``: the parameters travel in 16 bits and are
averaged in float32 (the ``"ring"`` or ``"mpi"`` allreduce); every replica then holds
the average as it arrived, rounded once to the wire's precision.

Between averagings the replicas drift apart (the scheme is inconsistent; the epoch's
``replica_divergence`` shows by how much), and communication drops by the factor
``period``. ``period=1`` averages after every step: for plain SGD (a linear update rule)
that equals averaging the gradients, i.e. ``ConsistentDecentralized``. Optimizer state
(momentum, moments) stays local and is not averaged.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.collectives.options import check_allreduce_options
from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer
from deep500.utils.errors import Deep500Error


class ModelAverageDecentralized(DistributedOptimizer):
    """Local steps; allreduce-average the parameters every ``period`` steps."""
    #: Why overlap=True is refused (DistributedOptimizer.check_overlap).
    cannot_overlap = (
        "it averages the parameters every `period` steps after the update, so no "
        "communication waits for backprop")
    consistent = False

    def __init__(self, base_optimizer, comm=None, period: int = 4,
                 algorithm: str = "ring", comm_dtype: str = "float32",
                 overlap: bool = False):
        self._allreduce = check_allreduce_options("ModelAverageDecentralized", algorithm,
                                                  comm_dtype=comm_dtype)
        super().__init__(base_optimizer, comm, comm_dtype, overlap)
        if int(period) < 1:
            raise Deep500Error(f"ModelAverageDecentralized: period must be at least 1 "
                               f"step, got {period}")
        self.period = int(period)
        self.algorithm = self._allreduce.name
        self.averagings = 0
        self._drift: list[float] = []

    def scheme_hyperparameters(self) -> dict:
        return {"period": self.period, "allreduce": self.algorithm}

    def step(self, inputs: dict) -> dict:
        self._before_step(inputs)
        outputs, gradients = self.compute_gradients(inputs)
        self.apply_gradients(gradients)
        if (self.step_count + 1) % self.period == 0:
            self.average_parameters()
        return self._finish_step(inputs, outputs)

    def average_parameters(self) -> None:
        fused = self.fused()
        buffer = fused.pack(self.fetch_parameters())
        local = buffer.copy()
        with self.phase("communication"):
            self.comm.allreduce(buffer, op="average", out=buffer,
                                algorithm=self._allreduce, **self.wire_options)
        with self.phase("update"):
            self.feed_parameters(fused.unpack())
        # how far this replica had drifted from the average: free, the mean is here
        self._drift.append(float(np.linalg.norm(local - buffer)))
        self.averagings += 1

    def scheme_measurements(self) -> dict:
        """``averagings`` so far, and this epoch's ``divergence_before_sync`` (mean and
        max over its averagings of ``||w_rank - mean_i w_i||_2`` just before averaging:
        what the replicas drift apart between synchronisations)."""
        drift, self._drift = self._drift, []
        return {"averagings": self.averagings,
                "divergence_before_sync_mean": float(np.mean(drift)) if drift else None,
                "divergence_before_sync_max": max(drift) if drift else None}

    def analytic_traffic(self, steps: int) -> dict:
        # steps counted from the start of training (the averaging period's phase)
        calls = steps // self.period
        if self.algorithm == "ring":
            return self.ring_allreduce_traffic(calls,
                                               f"the parameters, every {self.period} steps")
        fused = self.fused()
        one = self.comm.allreduce_traffic(fused.buffer.size, fused.buffer.itemsize,
                                          self._allreduce, wire_dtype=self.comm_dtype)
        return {"bytes_sent": calls * one.bytes_sent,
                "bytes_received": calls * one.bytes_received,
                "model": f"the parameters, every {self.period} steps: {self.algorithm} "
                         f"allreduce of {self.wire_nbytes(fused.buffer)} B"
                         f"{self._wire_note()} (AllreduceAlgorithm.traffic)"}
