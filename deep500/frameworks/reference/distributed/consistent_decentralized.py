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

import os

from deep500.lv3_distributed.compressed_allreduce import WIRE_ALGORITHMS
from deep500.lv3_distributed.communication import (ALLREDUCE_ALGORITHMS,
                                                   check_mpich_allreduce_algorithm,
                                                   check_segment_bytes,
                                                   mpich_allreduce_algorithm)
from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer
from deep500.lv3_distributed.gradient_buckets import DEFAULT_BUCKET_BYTES
from deep500.lv3_distributed.wire_dtype import check_comm_dtype
from deep500.utils.errors import Deep500Error


def check_allreduce_options(owner: str, algorithm, segment_bytes=None,
                            mpi_algorithm=None, environ=None,
                            comm_dtype: str = "float32") -> None:
    """Raise ``Deep500Error`` naming the option if ``algorithm`` is not one of
    ``ALLREDUCE_ALGORITHMS``, if ``segment_bytes`` is given to another algorithm than
    ``"segmented_ring"`` or is not a positive integer, or if ``mpi_algorithm`` is given
    to another algorithm than ``"mpi"``, is not an MPICH algorithm, or is not the one
    MPICH will start with (``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` in ``environ``,
    default ``os.environ``, which ``mpirun`` passes to the ranks), or if ``comm_dtype``
    is not one of ``wire_dtype.COMM_DTYPES`` or is narrower than float32 with an
    algorithm that cannot carry it (``compressed_allreduce.WIRE_ALGORITHMS``)."""
    if algorithm not in ALLREDUCE_ALGORITHMS:
        raise Deep500Error(f"{owner}: algorithm={algorithm!r} is not an allreduce "
                           f"algorithm; choose one of {', '.join(ALLREDUCE_ALGORITHMS)}")
    check_comm_dtype(comm_dtype, f"{owner}: comm_dtype")
    if comm_dtype != "float32" and algorithm not in WIRE_ALGORITHMS:
        raise Deep500Error(f"{owner}: comm_dtype={comm_dtype!r} needs an allreduce that "
                           f"reduces at float32 what travels in 16 bits: algorithm "
                           f"{' or '.join(map(repr, WIRE_ALGORITHMS))}, not "
                           f"{algorithm!r}; change the algorithm or use "
                           f"comm_dtype='float32'")
    if segment_bytes is not None:
        if algorithm != "segmented_ring":
            raise Deep500Error(f"{owner}: segment_bytes={segment_bytes!r} applies to "
                               f"algorithm='segmented_ring' only (algorithm is "
                               f"{algorithm!r}); remove it or change the algorithm")
        check_segment_bytes(segment_bytes, f"{owner}: segment_bytes")
    if mpi_algorithm is not None:
        if algorithm != "mpi":
            raise Deep500Error(f"{owner}: mpi_algorithm={mpi_algorithm!r} applies to "
                               f"algorithm='mpi' only (algorithm is {algorithm!r}); "
                               f"remove it or change the algorithm")
        check_mpich_allreduce_algorithm(mpi_algorithm, f"{owner}: mpi_algorithm")
        in_effect = mpich_allreduce_algorithm(os.environ if environ is None else environ)
        if mpi_algorithm != in_effect:
            raise Deep500Error(
                f"{owner}: mpi_algorithm={mpi_algorithm!r}, but MPICH starts with "
                f"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM={in_effect!r} (read once, at "
                f"MPI_Init). Set it in the environment before MPI starts, e.g. "
                f"'MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM={mpi_algorithm} deep500 run --np N "
                f"recipe.yaml'; mpi_algorithm then checks that it is in effect")


class ConsistentDecentralized(DistributedOptimizer):
    """Allreduce-average the fused gradients each step, then update on every rank (the
    step of :class:`d5.DistributedOptimizer`, with the allreduce chosen here).

    ``algorithm``: the allreduce of :class:`d5.CommunicationNetwork`, one of
    ``ALLREDUCE_ALGORITHMS``: Deep500's own (``"ring"``, ``"linear"``, ``"binomial"``,
    ``"recursive_doubling"``, ``"rabenseifner"``, ``"segmented_ring"``; counted
    exactly) or ``"mpi"`` (MPI's, counted by a model). ``segment_bytes``: the segment
    size of ``"segmented_ring"`` (default ``allreduce_algorithms.DEFAULT_SEGMENT_BYTES``).
    ``mpi_algorithm``: with ``"mpi"``, the MPICH algorithm expected
    (``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM``, which must be set in the environment
    before MPI starts; this option checks it is in effect and records it).
    ``comm_dtype``: ``"float32"`` (default), ``"float16"`` or ``"bfloat16"`` on the
    wire, reduced in float32 (``"ring"`` and ``"mpi"`` only; see
    :mod:`~deep500.lv3_distributed.compressed_allreduce`); every rank still holds
    bit-identical parameters.
    ``overlap``: one ``MPI_Iallreduce`` per gradient bucket of ``bucket_bytes``,
    started during backprop and waited for before the update
    (:mod:`~deep500.lv3_distributed.gradient_buckets`); it needs ``algorithm="mpi"``
    (Deep500's own allreduce algorithms are blocking). The parameters equal the
    blocking scheme's up to the association of the sums (bit for bit on 2 ranks).
    ``compute_only_every``: see :class:`d5.DistributedOptimizer`.
    Bad values raise ``Deep500Error`` naming the option (``check_allreduce_options``).
    """

    def __init__(self, base_optimizer, comm=None, algorithm: str = "ring",
                 segment_bytes: int | None = None, mpi_algorithm: str | None = None,
                 comm_dtype: str = "float32", overlap: bool = False,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, compute_only_every: int = 10):
        self.check_options(algorithm, segment_bytes, mpi_algorithm, comm_dtype, overlap,
                           bucket_bytes)
        super().__init__(base_optimizer, comm, comm_dtype, overlap, bucket_bytes,
                         compute_only_every)
        self.allreduce_algorithm = algorithm
        self.allreduce_options = {k: v for k, v in (("segment_bytes", segment_bytes),
                                                    ("mpi_algorithm", mpi_algorithm))
                                  if v is not None}

    @classmethod
    def check_options(cls, algorithm: str = "ring", segment_bytes=None,
                      mpi_algorithm=None, comm_dtype: str = "float32",
                      overlap: bool = False, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                      compute_only_every: int = 10) -> None:
        """The checks of the constructor, without one (a recipe calls this up front)."""
        check_allreduce_options("ConsistentDecentralized", algorithm, segment_bytes,
                                mpi_algorithm, comm_dtype=comm_dtype)
        if cls.check_overlap(overlap, bucket_bytes) and algorithm != "mpi":
            raise Deep500Error(
                f"ConsistentDecentralized: overlap=True starts a non-blocking allreduce "
                f"(MPI_Iallreduce) per gradient bucket, but algorithm={algorithm!r} is "
                f"one of Deep500's blocking allreduces; set algorithm='mpi' or "
                f"overlap=False")

    @property
    def algorithm(self) -> str:
        return self.allreduce_algorithm

    def scheme_hyperparameters(self) -> dict:
        chosen = {"allreduce": self.allreduce_algorithm}
        if self.allreduce_algorithm == "segmented_ring":
            chosen["segment_bytes"] = self.allreduce_options.get(
                "segment_bytes", self.comm.segment_bytes)
        if self.allreduce_algorithm == "mpi":
            chosen["mpi_algorithm"] = self.comm.mpi_allreduce_algorithm
        return chosen

    def analytic_traffic(self, steps: int) -> dict:
        """``steps`` allreduces of the fused gradients by the chosen algorithm: its
        exact per-rank formula (``volume.py``), or for ``"mpi"`` the model recorded."""
        fused = self.fused()
        one = self.comm.allreduce_traffic(
            fused.buffer.size, fused.buffer.itemsize, self.allreduce_algorithm,
            self.allreduce_options.get("segment_bytes"), self.comm_dtype)
        return {"bytes_sent": steps * one.bytes_sent,
                "bytes_received": steps * one.bytes_received,
                "model": f"the gradients, every step: {self.allreduce_algorithm} "
                         f"allreduce of {self.wire_nbytes(fused.buffer)} B"
                         f"{self._wire_note()} (volume.py)"}
