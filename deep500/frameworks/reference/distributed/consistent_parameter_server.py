"""Synchronous parameter server: every rank sends its gradient to the root, the root
averages them and applies the update, and sends the new parameters back to every rank
(Li et al., "Scaling Distributed Machine Learning with the Parameter Server", OSDI
2014; the synchronous variant of Ben-Nun & Hoefler, ACM CSUR 2019, Section 7.2).

Only the root runs the update rule and keeps optimizer state (momentum, moments); the
other ranks only compute gradients. After every step all ranks hold the root's
parameters, so the scheme is consistent, and with ``d5.DistributedSampler`` it takes
the same steps as data-parallel SGD with the global minibatch.

``comm_dtype="float16"`` / ``"bfloat16"``: gradients and parameters travel in 16 bits
(half the bytes). The root widens the gradients and averages them in float32 and keeps
the float32 parameters (the master copy, as in mixed-precision training; Micikevicius
et al., ICLR 2018); the workers compute on the parameters as they arrived, rounded to
the wire's precision, so the replicas differ by that rounding (``consistent`` is then
False and ``replica_divergence`` measures it).

Traffic per step, counted exactly: each worker sends n bytes (its gradient, a linear
gather) and receives n (the parameters, one message from the root); the root receives
(p - 1) n and sends (p - 1) n: the root's link carries p - 1 times what a ring
allreduce would, which is what makes a single parameter server a bottleneck.

``overlap=True`` (float32 on the wire): each gradient bucket travels to the root as soon
as backprop completes it (:class:`~deep500.lv3_distributed.bucket_requests.
GatherMeanRequest`, started by ``GradientBuckets``), so the push overlaps backprop; the
root's update and the parameters' way back follow the last bucket, as blocking. The
same bytes, and the same parameters bit for bit, as the blocking step.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.bucket_requests import GatherMeanRequest
from deep500.lv3_distributed.communication import wait_all
from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer
from deep500.lv3_distributed.gradient_buckets import DEFAULT_BUCKET_BYTES
from deep500.utils.errors import Deep500Error

_TAG_PARAMETERS = 4101


class ConsistentParameterServer(DistributedOptimizer):
    """Gradients to ``root`` (gather), update there, parameters back to every rank;
    ``overlap``, ``bucket_bytes``, ``compute_only_every``, ``progress``: see
    :class:`d5.DistributedOptimizer` (the gradients' push overlaps; float32 only)."""

    def __init__(self, base_optimizer, comm=None, root: int = 0,
                 comm_dtype: str = "float32", overlap: bool = False,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, compute_only_every: int = 10,
                 progress: str = "calls"):
        type(self).check_options(comm_dtype, overlap, bucket_bytes, progress)
        super().__init__(base_optimizer, comm, comm_dtype, overlap, bucket_bytes,
                         compute_only_every, progress)
        self.consistent = self.wire is None
        if not 0 <= int(root) < self.size:
            raise Deep500Error(f"ConsistentParameterServer: root {root} is not a rank of "
                               f"this world of {self.size}")
        self.root = int(root)
        self._gathered: np.ndarray | None = None
        self._parameters = None
        self._widened: np.ndarray | None = None

    @classmethod
    def check_options(cls, comm_dtype: str = "float32", overlap: bool = False,
                      bucket_bytes: int = DEFAULT_BUCKET_BYTES, progress: str = "calls",
                      **_options) -> None:
        """The constructor's checks that need no MPI (a recipe calls this up front)."""
        super().check_options(comm_dtype, overlap, bucket_bytes, progress)
        if overlap and comm_dtype != "float32":
            raise Deep500Error(f"ConsistentParameterServer: overlap=True pushes the "
                               f"buckets in float32; comm_dtype={comm_dtype!r} needs "
                               f"overlap=False")

    def scheme_hyperparameters(self) -> dict:
        return {"root": self.root}

    def bucket_exchange(self, comm, buffer: np.ndarray):
        """An overlapped bucket: to the root, averaged there (non-blocking)."""
        return comm.timed("push", lambda: GatherMeanRequest(self.comm, buffer, self.root))

    def step(self, inputs: dict) -> dict:
        if self.overlap:
            return self._overlapped_server_step(inputs)
        outputs, fused, buffer = self.packed_gradients(inputs)
        if self._parameters is None:
            self._parameters = self.new_fused_buffer()
        parameters = self._parameters
        is_root = self.rank == self.root
        wire = self.wire
        with self.phase("communication"):
            sent = buffer if wire is None else wire.encode(buffer)
            if is_root and self._gathered is None:
                self._gathered = np.empty((self.size, sent.size), sent.dtype)
            gathered = self.comm.gather(sent, self.root, out=self._gathered)
        if is_root:
            with self.phase("communication"):   # the reduction, as inside an allreduce
                if wire is not None:
                    if self._widened is None:
                        self._widened = np.empty(gathered.shape, buffer.dtype)
                    gathered = wire.decode(gathered.reshape(-1), self._widened)
                np.mean(gathered, axis=0, out=buffer)
            self.apply_gradients(fused.unpack())
            parameters.pack(self.fetch_parameters())
            with self.phase("communication"):
                outgoing = (parameters.buffer if wire is None
                            else wire.encode(parameters.buffer))
                wait_all([self.comm.isend(outgoing, rank, _TAG_PARAMETERS)
                          for rank in range(self.size) if rank != self.root])
        else:
            with self.phase("communication"):
                if wire is None:
                    self.comm.recv(parameters.buffer, self.root, _TAG_PARAMETERS)
                else:
                    arrived = self.comm.recv(wire.empty(buffer.size), self.root,
                                             _TAG_PARAMETERS)
                    wire.decode(arrived, parameters.buffer)
            with self.phase("update"):
                self.feed_parameters(parameters.unpack())
                self.base.step_count += 1
        return self._finish_step(inputs, outputs)

    def _overlapped_server_step(self, inputs: dict) -> dict:
        """The buckets were pushed during backprop; the root updates with their means
        and sends the parameters back, as the blocking step does."""
        outputs, averaged = self.overlapped_gradients(inputs)
        if self._parameters is None:
            self._parameters = self.new_fused_buffer()
        parameters = self._parameters
        if self.rank == self.root:
            self.apply_gradients({name: averaged[name] for name in self.parameter_names})
            parameters.pack(self.fetch_parameters())
            with self.phase("communication"):
                wait_all([self.comm.isend(parameters.buffer, rank, _TAG_PARAMETERS)
                          for rank in range(self.size) if rank != self.root])
        else:
            with self.phase("communication"):
                self.comm.recv(parameters.buffer, self.root, _TAG_PARAMETERS)
            with self.phase("update"):
                self.feed_parameters(parameters.unpack())
                self.base.step_count += 1
        return self._finish_step(inputs, outputs)

    def analytic_traffic(self, steps: int) -> dict:
        n, workers = self.wire_nbytes(self.fused().buffer), self.size - 1
        if self.rank == self.root:
            sent = received = workers * n
        else:
            sent = received = n
        return {"bytes_sent": steps * sent, "bytes_received": steps * received,
                "model": f"parameter server: each worker sends its {n} B gradient and "
                         f"receives {n} B of parameters per step; the root (p-1) x that"}
