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

from deep500.lv3_distributed.collectives import AllreduceAlgorithm, allreduce_names
from deep500.lv3_distributed.collectives.options import check_allreduce_options
from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer
from deep500.lv3_distributed.gradient_buckets import DEFAULT_BUCKET_BYTES
from deep500.lv3_distributed.progress_thread import check_progress
from deep500.utils.errors import Deep500Error


class ConsistentDecentralized(DistributedOptimizer):
    """Allreduce-average the fused gradients each step, then update on every rank (the
    step of :class:`d5.DistributedOptimizer`, with the allreduce chosen here).

    ``algorithm``: the allreduce of :class:`d5.CommunicationNetwork`, a name of
    ``collectives.allreduce_names()``: Deep500's own (``"ring"``, ``"linear"``,
    ``"binomial"``, ``"recursive_doubling"``, ``"rabenseifner"``, ``"segmented_ring"``;
    counted exactly) or ``"mpi"`` (MPI's, counted by a model). ``segment_bytes``: the
    segment size of ``"segmented_ring"`` (default
    ``collectives.segmented_ring.DEFAULT_SEGMENT_BYTES``).
    ``mpi_algorithm``: with ``"mpi"``, the MPICH algorithm expected
    (``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM``, which must be set in the environment
    before MPI starts; this option checks it is in effect and records it).
    ``comm_dtype``: ``"float32"`` (default), ``"float16"`` or ``"bfloat16"`` on the
    wire, reduced in float32 (every algorithm ``narrows_on_wire``); every rank still holds
    bit-identical parameters.
    ``overlap``: one non-blocking allreduce per gradient bucket of ``bucket_bytes``
    (``MPI_Iallreduce`` with ``algorithm="mpi"``, Deep500's ring with ``"ring"``),
    started during backprop and waited for before the update
    (:mod:`~deep500.lv3_distributed.gradient_buckets`); it needs an algorithm with a
    non-blocking form, ``"mpi"`` or ``"ring"`` (the other Deep500 ones block). The parameters
    equal the blocking scheme's up to the association of the sums (bit for bit on 2 ranks).
    ``compute_only_every``, ``progress``: see :class:`d5.DistributedOptimizer`.
    Bad values raise ``Deep500Error`` naming the option (``check_allreduce_options``).
    """

    def __init__(self, base_optimizer, comm=None, algorithm: str = "ring",
                 segment_bytes: int | None = None, mpi_algorithm: str | None = None,
                 comm_dtype: str = "float32", overlap: bool = False,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, compute_only_every: int = 10,
                 progress: str = "calls"):
        self._allreduce = self.check_options(algorithm, segment_bytes, mpi_algorithm,
                                             comm_dtype, overlap, bucket_bytes)
        super().__init__(base_optimizer, comm, comm_dtype, overlap, bucket_bytes,
                         compute_only_every, progress)
        self.allreduce_algorithm = self._allreduce   # the step's allreduce (looked up)
        self.allreduce_options = {k: v for k, v in (("segment_bytes", segment_bytes),
                                                    ("mpi_algorithm", mpi_algorithm))
                                  if v is not None}

    @classmethod
    def check_options(cls, algorithm: str = "ring", segment_bytes=None,
                      mpi_algorithm=None, comm_dtype: str = "float32",
                      overlap: bool = False, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                      compute_only_every: int = 10,
                      progress: str = "calls") -> AllreduceAlgorithm:
        """The checks of the constructor, without one (a recipe calls this up front);
        returns the allreduce algorithm's object."""
        check_progress(progress, "ConsistentDecentralized: progress")
        chosen = check_allreduce_options("ConsistentDecentralized", algorithm,
                                         segment_bytes, mpi_algorithm,
                                         comm_dtype=comm_dtype)
        overlapped = cls.check_overlap(overlap, bucket_bytes)
        if overlapped and not chosen.non_blocking:
            able = " or ".join(f"algorithm={name!r}"
                               for name in allreduce_names(non_blocking=True))
            raise Deep500Error(
                f"ConsistentDecentralized: overlap=True starts a non-blocking allreduce "
                f"per gradient bucket, but algorithm={chosen.name!r} has no non-blocking "
                f"form; set {able} or overlap=False")
        return chosen

    @property
    def iallreduce_options(self) -> dict:
        """The overlapped buckets' allreduce: this scheme's algorithm (``ring``: Deep500's
        non-blocking ring; ``mpi``: ``MPI_Iallreduce``) and its wire."""
        return {**self.wire_options, "algorithm": self._allreduce.name}

    @property
    def algorithm(self) -> str:
        return self._allreduce.name

    def scheme_hyperparameters(self) -> dict:
        chosen = {"allreduce": self._allreduce.name}
        if "segment_bytes" in self._allreduce.options:
            chosen["segment_bytes"] = self.allreduce_options.get(
                "segment_bytes", self.comm.segment_bytes)
        if "mpi_algorithm" in self._allreduce.options:
            chosen["mpi_algorithm"] = self.comm.mpi_allreduce_algorithm
        return chosen

    def analytic_traffic(self, steps: int) -> dict:
        """``steps`` allreduces of the fused gradients by the chosen algorithm: its
        exact per-rank formula (``AllreduceAlgorithm.traffic``), or for ``"mpi"`` the model
        recorded."""
        fused = self.fused()
        one = self.comm.allreduce_traffic(
            fused.buffer.size, fused.buffer.itemsize, self._allreduce,
            self.allreduce_options.get("segment_bytes"), self.comm_dtype)
        return {"bytes_sent": steps * one.bytes_sent,
                "bytes_received": steps * one.bytes_received,
                "model": f"the gradients, every step: {self._allreduce.name} "
                         f"allreduce of {self.wire_nbytes(fused.buffer)} B"
                         f"{self._wire_note()} (AllreduceAlgorithm.traffic)"}
