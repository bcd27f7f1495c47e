"""Asynchronous SGD through a parameter server: Downpour SGD (Dean et al., "Large Scale
Distributed Deep Networks", NIPS 2012), the lock-free, order-of-arrival updates of
Hogwild! (Recht et al., NIPS 2011) applied to whole gradients at a server.

One rank, the ``root``, holds the authoritative parameters and is also a worker. Every
other rank, each step, computes the gradient of its minibatch on its local copy of the
parameters, sends it to the root and waits for the parameters the root returns. The
root applies gradients in the order they arrive with the base optimizer's update rule
(its momentum or Adam moments are the server's state), and answers each worker with the
fresh parameters, that worker only. No rank waits for the slowest: the replicas differ
(``consistent = False``) and a gradient may be computed on parameters that are several
updates old.

Staleness of an update (Dean et al. 2012; Zhang, Gupta, Lian & Liu, "Staleness-aware
Async-SGD", IJCAI 2016): the number of updates the root applied between the version of
the parameters the gradient was computed on and its own application. The root knows the
version it last sent each worker, so no version number travels; the epoch's histogram
``{staleness: updates}`` is in the root's measurements.

The root serves at its own steps: after computing its own gradient it receives every
request that arrived meanwhile (they arrived before its own gradient was ready, so they
are applied first), then applies its own. A worker therefore waits at most one root step
for its answer. Termination is deterministic: at the end of an epoch (``finish_epoch``)
each worker sends the root one empty message after its last answer, and the root serves
until it has every worker's; no step counts need to agree.

Traffic, per step of a worker: n bytes of gradient sent, n bytes of parameters received
(n = the fused parameters' size); the root receives and sends n bytes per worker step;
plus one 0-byte message per worker per epoch. Every byte goes through
:class:`d5.CommunicationNetwork` point-to-point calls and is counted exactly.

``comm_dtype="float16"`` / ``"bfloat16"``: gradients and parameters travel in 16 bits
(n is then half); the root widens each gradient before applying it to its float32
parameters (the master copy) and workers compute on the parameters as they arrived.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from deep500.lv3_distributed.communication import CommunicationNetwork
from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer, FusedBuffer
from deep500.utils.errors import Deep500Error

_TAG_GRADIENT, _TAG_PARAMETERS, _TAG_DONE = 1, 2, 3


class InconsistentParameterServer(DistributedOptimizer):
    """Asynchronous parameter server at rank ``root`` (also a worker); see the module
    docstring.

    Measurements per epoch (``end_epoch``): on the root ``updates_applied`` (every
    rank's steps), ``updates_by_rank``, ``staleness_histogram`` ``{staleness: count}``,
    ``mean_staleness`` and ``max_staleness``; on workers ``updates_applied`` is 0 and the
    histogram empty (staleness is measured where updates are applied).
    """
    #: Why overlap=True is refused (DistributedOptimizer.check_overlap).
    cannot_overlap = (
        "it is asynchronous (workers push gradients to and pull parameters from the "
        "root without waiting for each other), not a data-parallel allreduce")
    consistent = False

    def __init__(self, base_optimizer, comm=None, root: int = 0,
                 comm_dtype: str = "float32",
                 overlap: bool = False):
        super().__init__(base_optimizer, comm, comm_dtype, overlap)
        if not (isinstance(root, (int, np.integer)) and 0 <= root < self.size):
            raise Deep500Error(f"InconsistentParameterServer on rank {self.rank}: root="
                               f"{root!r} is not a rank of the communicator; choose one "
                               f"of 0..{self.size - 1}")
        from mpi4py import MPI
        self._MPI = MPI
        self.root = int(root)
        # A private communicator: probing for any source and tag there never meets a
        # user's message. Its traffic is recorded in the same volume.
        self._channel = CommunicationNetwork(self.comm.comm.Dup(), volume=self.comm.volume)
        self._probe = self._MPI.Status()
        self._empty = np.empty(0, np.uint8)
        self.version = 0                    # root: updates applied so far
        self._version_sent = [0] * self.size  # root: the version each rank computes on
        self._done: set[int] = set()
        self._staleness: Counter = Counter()
        self._updates_by_rank = [0] * self.size
        self._incoming: FusedBuffer | None = None
        self._outgoing: FusedBuffer | None = None
        self._narrowed: np.ndarray | None = None   # a 16-bit wire's buffer

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel.comm.Free()
            self._channel = None

    @property
    def is_root(self) -> bool:
        return self.rank == self.root

    def scheme_hyperparameters(self) -> dict:
        return {"root": self.root}

    # -- a step -------------------------------------------------------------------------
    def step(self, inputs: dict) -> dict:
        outputs, fused, buffer = self.packed_gradients(inputs)
        if self.is_root:
            computed_on = self.version
            self._serve_pending()
            self._apply(fused.unpack(), self.rank, computed_on)
        else:
            with self.phase("communication"):
                self._channel.send(self._narrow(buffer), self.root, _TAG_GRADIENT)
                self._channel.recv(self._arriving(buffer), self.root, _TAG_PARAMETERS)
                self._widen(buffer)
            with self.phase("update"):
                self.feed_parameters(fused.unpack())
        return self._finish_step(inputs, outputs)

    # -- the wire ------------------------------------------------------------------------
    def _narrow(self, buffer: np.ndarray) -> np.ndarray:
        """``buffer`` as it goes on the wire."""
        if self.wire is None:
            return buffer
        self._narrowed = self.wire.encode(buffer, self._narrowed)
        return self._narrowed

    def _arriving(self, buffer: np.ndarray) -> np.ndarray:
        """Where a message for ``buffer`` is received."""
        if self.wire is None:
            return buffer
        if self._narrowed is None:
            self._narrowed = self.wire.empty(buffer.size)
        return self._narrowed

    def _widen(self, buffer: np.ndarray) -> None:
        """Copy what arrived in ``_arriving(buffer)`` into ``buffer``."""
        if self.wire is not None:
            self.wire.decode(self._narrowed, buffer)

    # -- the server (root only) ---------------------------------------------------------
    def _apply(self, gradients: dict, source: int, computed_on: int) -> None:
        self._staleness[self.version - computed_on] += 1
        self._updates_by_rank[source] += 1
        self.apply_gradients(gradients)
        self.version += 1

    def _serve_pending(self) -> None:
        """Serve the requests that have arrived, in arrival order, without waiting. At
        most one round per worker, so that workers answered now and quick to ask again
        cannot keep the root from its own step."""
        probe = self._channel.comm.Iprobe
        for _ in range(self.size - 1):
            with self.phase("communication"):
                arrived = probe(self._MPI.ANY_SOURCE, self._MPI.ANY_TAG, self._probe)
            if not arrived:
                return
            self._serve(self._probe.Get_source(), self._probe.Get_tag())

    def _serve(self, source: int, tag: int) -> None:
        channel = self._channel
        if tag == _TAG_DONE:
            with self.phase("communication"):
                channel.recv(self._empty, source, _TAG_DONE)
            if source in self._done:
                raise Deep500Error(f"InconsistentParameterServer root (rank {self.rank}): "
                                   f"rank {source} finished the epoch twice; call "
                                   f"end_epoch once per epoch on every rank")
            self._done.add(source)
            return
        if self._incoming is None:
            self._incoming = self.new_fused_buffer()
            self._outgoing = self.new_fused_buffer()
        with self.phase("communication"):
            channel.recv(self._arriving(self._incoming.buffer), source, _TAG_GRADIENT)
            self._widen(self._incoming.buffer)
        self._apply(self._incoming.unpack(), source, self._version_sent[source])
        parameters = self._outgoing.pack(self.fetch_parameters())
        with self.phase("communication"):
            channel.send(self._narrow(parameters), source, _TAG_PARAMETERS)
        self._version_sent[source] = self.version

    # -- epochs -------------------------------------------------------------------------
    def finish_epoch(self) -> None:
        """Workers tell the root they are done; the root serves until every worker
        has (blocking probes: each worker's last request precedes its message)."""
        if not self.is_root:
            with self.phase("communication"):
                self._channel.send(self._empty, self.root, _TAG_DONE)
            return
        while len(self._done) < self.size - 1:
            with self.phase("communication"):
                self._channel.comm.Probe(self._MPI.ANY_SOURCE, self._MPI.ANY_TAG,
                                         self._probe)
            self._serve(self._probe.Get_source(), self._probe.Get_tag())
        self._done.clear()

    def scheme_measurements(self) -> dict:
        if not self.is_root:
            return {"updates_applied": 0, "staleness_histogram": {}}
        histogram = dict(sorted(self._staleness.items()))
        updates = sum(histogram.values())
        return {"updates_applied": updates,
                "updates_by_rank": list(self._updates_by_rank),
                "staleness_histogram": histogram,
                "mean_staleness": (sum(s * n for s, n in histogram.items()) / updates
                                   if updates else 0.0),
                "max_staleness": max(histogram, default=0)}

    def end_epoch(self) -> dict:
        measured = super().end_epoch()
        self._staleness = Counter()
        self._updates_by_rank = [0] * self.size
        return measured

    def analytic_traffic(self, steps: int) -> dict:
        n = self.wire_nbytes(self.fused().buffer)
        workers = self.size - 1
        if self.size == 1:
            sent = received = 0
        elif self.is_root:
            sent = received = workers * steps * n
        else:
            sent = received = steps * n
        return {"bytes_sent": sent, "bytes_received": received,
                "model": f"parameter server: a worker pushes its {n}-B gradient and "
                         f"pulls {n} B of parameters per step; the root receives and "
                         f"sends {n} B per step of each of its p-1 workers (every rank "
                         f"taking `steps` steps); plus one 0-B message per worker and "
                         f"epoch"}
