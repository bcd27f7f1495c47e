"""Nearest-neighbour training (NNT): asynchronous SGD in which each worker exchanges its
updates only with its neighbours on a ring or a k-dimensional torus (P. Viviani, "Deep
Learning at Scale with Nearest Neighbours Communications", PhD thesis, Università di
Torino, 2019, and its FAST framework; the algorithm's definition as in Viviani, Drocco
& Aldinucci, "Pushing the boundaries of parallel Deep Learning - A practical approach",
arXiv:1806.09528, 2018, Section 3: workers exchange their gradient *updates*
asynchronously, "partial communication" when an update reaches only some workers).

``exchange="updates"`` (the default, the thesis' definition): a worker contributes its
update, the gradient of its own minibatch, never the whole model except at the optional
per-epoch synchronisation. Each step a worker

1. computes the gradient ``g`` of its minibatch on its own parameters;
2. posts ``g`` to every distinct neighbour with ``MPI_Isend`` and goes on: at most
   ``max_outstanding`` sends per neighbour are in flight; when a neighbour has not
   taken them yet, the new gradient is *coalesced* (added) into one unsent message for
   that neighbour, sent as soon as a slot frees, so a slow neighbour never blocks the
   sender and no update is lost (gradients add, so a coalesced sum is the same
   contribution as its parts);
3. takes whatever the neighbours' messages have **arrived** (``MPI_Iprobe`` then
   ``MPI_Recv`` of a message already there), never waiting for one;
4. applies ``(g + sum of arrived gradients) / (1 + d)`` with the base update rule, d
   the number of distinct neighbours: each contribution weighs 1/(1 + d), as in the
   synchronous neighbourhood mean of ``ConsistentNeighbors``; a neighbour whose
   updates have not arrived contributes later, not never. (The paper adds the updates
   -lr g unweighted; for plain SGD that is this rule with a learning rate 1 + d times
   larger: the weighting keeps the learning rate's meaning of synchronous SGD.)

When every worker is every other's neighbour (a ring of 3) the communication is
complete: with plain SGD all replicas are equal once the end-of-epoch drain has
delivered every update (the paper's Statement 1; tested). With partial communication
(a ring of 4 or more, a larger torus) the replicas drift apart, and the drift grows:
linearised around a minimum with Hessian H, the replicas' deviations evolve as
``e <- e - lr/(1+d) (A (x) H) e`` with A = I + adjacency, and a mode of A with a
negative eigenvalue a grows by ``1 - lr a h/(1+d)`` per step along a curvature h > 0.
A ring of p has the eigenvalues 1 + 2cos(2 pi k/p), negative for p >= 4; a bipartite
graph (an even ring, a torus of even extents) has 1 - d, the most negative. The
per-epoch synchronisation to the best worker resets the drift; measured in
docs/distributed.md.

``exchange="parameters"``: asynchronous gossip averaging instead (AD-PSGD, Lian, Zhang,
Zhang & Liu, "Asynchronous Decentralized Parallel Stochastic Gradient Descent", ICML
2018): a worker computes ``g`` at its parameters, replaces them by the mean of its own
and the latest parameters of the neighbours that arrived since its last mixing, applies
``g`` with the base update rule, and posts its new parameters; an unsent copy is
replaced by the newer one (old messages dropped), a neighbour's older copies are
overwritten by its latest. Averaging contracts the replicas towards each other, so it
is stable on any topology.

Topologies: ``ring`` (rank ± 1; at least 3 workers, since on 2 both sides are the same
rank) or ``torus`` with ``torus_shape: [a, b, ...]`` (k dimensions, ranks in row-major
order of their coordinates, product = the number of ranks; default the most square
2-D shape); a dimension of extent 2 gives one neighbour, not two, so nothing is sent
twice to the same rank.

Epochs: at the end of an epoch (``finish_epoch``) each worker flushes its coalesced
messages, tells each neighbour it is done (a 0-byte message after its last update) and
takes every neighbour's updates until their "done", then applies them: an epoch's
updates all land in that epoch and no message is left behind for the next epoch or the
next configuration (the scheme's messages travel on its own duplicated communicator,
freed by ``close``, which drains the same way first).

Per-epoch synchronisation to the best worker (``sync_best_every_epoch=True``): every
worker's test accuracy is gathered (an allreduce of a p-vector, counted) and the
parameters of the one with the best (lowest rank on ties) are broadcast to all (binomial
tree, counted); each worker keeps its own optimizer state (momentum). Which accuracy:

* the trainer's epoch-end test accuracy when the scheme is also given to the trainer as
  a training event (``d5.test_training(..., optimizer=nnt, events=[nnt])``): Deep500's
  trainer calls ``end_epoch`` before the validation pass and tells optimizers nothing
  of it, so the scheme listens to ``after_test_set`` and synchronises there;
* otherwise (e.g. a recipe, whose trainer does not hear of the scheme) an estimate
  inside the scheme: the *progressive validation* accuracy (Blum, Kalai & Langford,
  COLT 1999) of the epoch's last ``accuracy_steps`` steps, i.e. the predictions of the
  forward pass of each step on a minibatch the worker had not yet trained on in this
  epoch (no extra pass; the samples may have been seen in earlier epochs, so it is an
  estimate, not a test accuracy). ``best_sync`` in the epoch's measurements says which
  source was used, every worker's accuracy and the chosen rank.

Measurements per epoch: ``updates_sent`` (messages posted), ``messages_coalesced``
(contributions that waited for a send slot: added to, or replaced, the unsent one),
``contributions_received`` (messages received), ``arrived_per_step`` (the mean number of
neighbours' messages applied per step: below d when neighbours lag), ``neighbours``.

Traffic (``analytic_traffic``): an **upper bound**, because the scheme is asynchronous:
at most one message of n bytes per step to each of the d neighbours and at most as many
received (coalescing only lowers it), plus one 0-byte message per neighbour and epoch,
plus with best-sync the accuracy allreduce and a broadcast of n bytes (at most
ceil(log2 p) sends of n for the broadcast's root-side ranks).
"""
from __future__ import annotations

import math
import time
from collections import deque

import numpy as np

from deep500.lv2_training.events import TrainingEvent
from deep500.lv3_distributed.communication import (CommunicationNetwork,
                                                   check_torus_shape, torus_neighbour_ranks,
                                                   torus_shape)
from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer
from deep500.lv3_distributed.option_checks import check_choice
from deep500.utils.errors import Deep500Error

TOPOLOGIES = ("ring", "torus")
EXCHANGES = ("updates", "parameters")
_TAG_UPDATE, _TAG_DONE = 1, 2


class _Outbox:
    """The sends to one neighbour: in-flight requests with their wire buffers, spare
    buffers, and one unsent (coalesced) float32 message."""
    __slots__ = ("in_flight", "spare", "pending", "pending_count")

    def __init__(self, size: int, dtype):
        self.in_flight: deque = deque()
        self.spare: list[np.ndarray] = []
        self.pending = np.zeros(size, dtype)
        self.pending_count = 0


class NearestNeighborTraining(DistributedOptimizer, TrainingEvent):
    """Asynchronous nearest-neighbour training (NNT) on a ring or a k-dimensional
    torus; see the module docstring.

    Options: ``topology`` ``"ring"`` or ``"torus"``; ``torus_shape`` (torus only; a
    list whose product is the number of ranks); ``sync_best_every_epoch``;
    ``max_outstanding`` (sends in flight per neighbour, >= 1); ``accuracy_steps`` (steps
    of the progressive accuracy estimate); ``output`` and ``label`` (the logits output
    and the label input of the estimate; ``label=None``: the minibatch's one integer
    array); ``comm_dtype``.
    """
    cannot_overlap = ("it is asynchronous (each worker sends its gradient to its "
                      "neighbours and applies whatever has arrived), not a "
                      "data-parallel allreduce")
    consistent = False

    def __init__(self, base_optimizer, comm=None, topology: str = "ring",
                 torus_shape: list | None = None, exchange: str = "updates",
                 sync_best_every_epoch: bool = False,
                 max_outstanding: int = 2, accuracy_steps: int = 20,
                 output: str = "output", label: str | None = None,
                 comm_dtype: str = "float32", overlap: bool = False):
        type(self).check_nnt_options(topology, torus_shape, exchange,
                                     sync_best_every_epoch, max_outstanding,
                                     accuracy_steps)
        super().__init__(base_optimizer, comm, comm_dtype, overlap)
        self.topology, self.exchange = topology, exchange
        self.sync_best = bool(sync_best_every_epoch)
        self.max_outstanding = int(max_outstanding)
        self.accuracy_steps = int(accuracy_steps)
        self.output, self.label = output, label
        where = f"NearestNeighborTraining on rank {self.rank} of {self.size}"
        if topology == "ring":
            if self.size < 3:
                raise Deep500Error(
                    f"{where}: a ring needs at least 3 workers (on {self.size} the left "
                    f"and right neighbours are the same rank); run on 3 or more ranks, "
                    f"or use topology: torus (e.g. torus_shape: [{self.size}])")
            self.shape: tuple[int, ...] = (self.size,)
            self.neighbours = [(self.rank - 1) % self.size, (self.rank + 1) % self.size]
        else:
            self.shape = (check_torus_shape(torus_shape, self.size, f"{where}: torus_shape")
                          if torus_shape is not None else torus_shape_default(self.size))
            self.neighbours = torus_neighbour_ranks(self.rank, self.shape)
        from mpi4py import MPI
        self._MPI = MPI
        # The scheme's own communicator: its probes never meet another message, and
        # freeing it leaves nothing behind. Its traffic lands in the same volume.
        self._channel = CommunicationNetwork(self.comm.comm.Dup(), volume=self.comm.volume)
        self._status = MPI.Status()
        self._empty = np.empty(0, np.uint8)
        self._outboxes: dict[int, _Outbox] | None = None
        self._inbox: np.ndarray | None = None      # a message as it arrives (wire dtype)
        self._arrived: np.ndarray | None = None    # the sum of arrived updates
        self._latest: dict[int, np.ndarray] = {}    # parameters: each neighbour's last
        self._fresh: set[int] = set()               # parameters: arrived since mixing
        self._mixed = None                          # parameters: a FusedBuffer
        self._done_from: set[int] = set()
        self._trainer_reports = False   # the trainer calls after_test_set on us
        self._dirty = False             # steps since the last end-of-epoch drain
        self._progress: deque = deque(maxlen=self.accuracy_steps)
        self._reset_counters()

    # -- options ---------------------------------------------------------------------------
    @classmethod
    def check_nnt_options(cls, topology="ring", torus_shape=None, exchange="updates",
                          sync_best_every_epoch=False, max_outstanding=2,
                          accuracy_steps=20) -> None:
        """The checks that need no MPI (a recipe runs them up front)."""
        check_choice(cls.__name__, "topology", topology, TOPOLOGIES)
        check_choice(cls.__name__, "exchange", exchange, EXCHANGES)
        if torus_shape is not None and topology != "torus":
            raise Deep500Error(f"{cls.__name__}: torus_shape is for topology: torus; "
                               f"remove it or set topology: torus")
        if torus_shape is not None:   # the extents here, their product on the ranks
            check_torus_shape(torus_shape, math.prod(torus_shape)
                              if _extents_ok(torus_shape) else 0,
                              f"{cls.__name__}: torus_shape")
        if not isinstance(sync_best_every_epoch, (bool, np.bool_)):
            raise Deep500Error(f"{cls.__name__}: sync_best_every_epoch="
                               f"{sync_best_every_epoch!r}: give true or false")
        for name, value in (("max_outstanding", max_outstanding),
                            ("accuracy_steps", accuracy_steps)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or value < 1:
                raise Deep500Error(f"{cls.__name__}: {name}={value!r}: give an integer "
                                   f">= 1")

    @classmethod
    def check_options(cls, comm_dtype: str = "float32", overlap: bool = False,
                      topology: str = "ring", torus_shape=None, exchange: str = "updates",
                      sync_best_every_epoch: bool = False, max_outstanding: int = 2,
                      accuracy_steps: int = 20, **options) -> None:
        super().check_options(comm_dtype, overlap, **options)
        cls.check_nnt_options(topology, torus_shape, exchange, sync_best_every_epoch,
                              max_outstanding, accuracy_steps)

    def scheme_hyperparameters(self) -> dict:
        chosen = {"topology": self.topology, "exchange": self.exchange,
                  "sync_best_every_epoch": self.sync_best,
                  "max_outstanding": self.max_outstanding}
        if self.topology == "torus":
            chosen["torus_shape"] = list(self.shape)
        return chosen

    # -- a step ------------------------------------------------------------------------------
    def step(self, inputs: dict) -> dict:
        outputs, fused, gradient = self.packed_gradients(inputs)
        self._record_progress(inputs, outputs)
        self._dirty = True
        if self.exchange == "updates":
            with self.phase("communication"):
                self._post(gradient)
                arrived = self._take_arrived(block=False)
            self._apply(gradient, arrived)
        else:
            with self.phase("communication"):
                arrived = self._take_arrived(block=False)
            self._mix()
            self.apply_gradients(fused.unpack())   # computed before mixing (D-PSGD)
            mixed = self._mixed_buffer()
            parameters = mixed.pack(self.fetch_parameters())
            with self.phase("communication"):
                self._post(parameters)
        self._steps += 1
        self._arrivals += arrived
        return self._finish_step(inputs, outputs)

    def _mixed_buffer(self):
        if self._mixed is None:
            self._mixed = self.new_fused_buffer()
        return self._mixed

    def _mix(self) -> None:
        """Parameters: this worker's parameters become the mean of its own and the
        neighbours' that arrived since the last mixing (their latest each)."""
        if not self._fresh:
            return
        mixed = self._mixed_buffer()
        buffer = mixed.pack(self.fetch_parameters())
        for neighbour in self.neighbours:   # a fixed order
            if neighbour in self._fresh:
                buffer += self._latest[neighbour]
        buffer /= 1 + len(self._fresh)
        self._fresh.clear()
        with self.phase("update"):
            self.feed_parameters(mixed.unpack())

    def _apply_drained(self, arrived: int) -> None:
        """What the end-of-epoch drain received: the updates, or a last mixing."""
        if self.exchange == "updates":
            self._apply(None, arrived)
        else:
            self._mix()

    def _apply(self, own: np.ndarray | None, arrived: int) -> None:
        """The base update rule on (own + arrived) / (1 + d); nothing if both empty."""
        if own is None and arrived == 0:
            return
        combined = self.fused().buffer
        if own is None:
            np.copyto(combined, self._arrived)
        elif arrived:
            np.add(own, self._arrived, out=combined)
        combined /= 1 + len(self.neighbours)
        self.apply_gradients(self.fused().unpack())

    # -- sending -------------------------------------------------------------------------------
    def _outboxes_ready(self, like: np.ndarray) -> dict[int, _Outbox]:
        if self._outboxes is None:
            self._outboxes = {n: _Outbox(like.size, like.dtype) for n in self.neighbours}
        return self._outboxes

    def _post(self, contribution: np.ndarray) -> None:
        """Queue ``contribution`` for every neighbour and send what the in-flight bound
        allows; never waits. An unsent update is coalesced (added to), unsent
        parameters are replaced (the older are dropped)."""
        for neighbour, box in self._outboxes_ready(contribution).items():
            if box.pending_count:
                if self.exchange == "updates":
                    box.pending += contribution
                else:
                    np.copyto(box.pending, contribution)
                self._coalesced += 1
            else:
                np.copyto(box.pending, contribution)
            box.pending_count += 1
            self._flush(neighbour, box)

    def _reap(self, box: _Outbox) -> None:
        while box.in_flight and box.in_flight[0][0].test():
            box.spare.append(box.in_flight.popleft()[1])

    def _flush(self, neighbour: int, box: _Outbox) -> bool:
        """Send the unsent message if a slot is free; whether nothing is left unsent."""
        self._reap(box)
        if not box.pending_count:
            return True
        if len(box.in_flight) >= self.max_outstanding:
            return False
        buffer = box.spare.pop() if box.spare else self._wire_buffer(box.pending)
        if self.wire is None:
            np.copyto(buffer, box.pending)
        else:
            self.wire.encode(box.pending, buffer)
        box.in_flight.append((self._channel.isend(buffer, neighbour, _TAG_UPDATE), buffer))
        box.pending_count = 0
        self._messages += 1
        return True

    def _wire_buffer(self, like: np.ndarray) -> np.ndarray:
        return np.empty_like(like) if self.wire is None else self.wire.empty(like.size)

    # -- receiving -----------------------------------------------------------------------------
    def _take_arrived(self, block: bool) -> int:
        """Receive the neighbours' messages into ``_arrived`` (their sum); returns how
        many. ``block=False``: only those already there. ``block=True``: every message
        up to each neighbour's "done" (the end of an epoch)."""
        buffer = self.fused().buffer
        if self._arrived is None:
            self._arrived = np.zeros_like(buffer)
            self._inbox = self._wire_buffer(buffer)
        self._arrived.fill(0)
        count = 0
        iprobe, status = self._channel.comm.Iprobe, self._status
        for neighbour in self.neighbours:
            while neighbour not in self._done_from and iprobe(neighbour, self._MPI.ANY_TAG,
                                                              status):
                count += self._receive(neighbour, status.Get_tag())
        if block:
            count += self._drain_until_done()
        return count

    def _receive(self, neighbour: int, tag: int) -> int:
        if tag == _TAG_DONE:
            self._channel.recv(self._empty, neighbour, _TAG_DONE)
            self._done_from.add(neighbour)
            return 0
        self._channel.recv(self._inbox, neighbour, _TAG_UPDATE)
        if self.exchange == "updates":
            target = self._arrived
        else:   # only the latest parameters count: an older message is overwritten
            if neighbour not in self._latest:
                self._latest[neighbour] = np.empty_like(self._arrived)
            target = self._latest[neighbour]
            self._fresh.add(neighbour)
        if self.wire is None:
            if self.exchange == "updates":
                target += self._inbox
            else:
                np.copyto(target, self._inbox)
        elif self.exchange == "updates":
            target += self.wire.decode(self._inbox, np.empty_like(target))
        else:
            self.wire.decode(self._inbox, target)
        self._received += 1
        return 1

    def _drain_until_done(self) -> int:
        """The end of an epoch: flush every unsent message, tell each neighbour "done",
        and receive until every neighbour's "done". Polls (sending and receiving
        alternately) so that two neighbours flushing to each other never deadlock."""
        outboxes = self._outboxes_ready(self.fused().buffer)
        done_sent: list = []
        count = 0
        iprobe, status = self._channel.comm.Iprobe, self._status
        while True:
            progress = False
            if not done_sent and all(self._flush(n, box) for n, box in outboxes.items()):
                done_sent = [self._channel.isend(self._empty, n, _TAG_DONE)
                             for n in self.neighbours]
                progress = True
            for neighbour in self.neighbours:
                while neighbour not in self._done_from and iprobe(
                        neighbour, self._MPI.ANY_TAG, status):
                    count += self._receive(neighbour, status.Get_tag())
                    progress = True
            if done_sent and len(self._done_from) == len(self.neighbours):
                break
            if not progress:
                time.sleep(1e-4)   # ranks may share cores: let the neighbour run
        # Each neighbour received these before its "done": the waits return at once.
        for box in outboxes.values():
            while box.in_flight:
                request, buffer = box.in_flight.popleft()
                request.wait()
                box.spare.append(buffer)
        for request in done_sent:
            request.wait()
        self._done_from.clear()
        return count

    # -- epochs ----------------------------------------------------------------------------------
    def finish_epoch(self) -> None:
        """Drain the neighbours' messages (see the module docstring), apply them, and
        with best-sync and no trainer reporting test accuracy, synchronise to the best
        worker by the progressive estimate."""
        if self.size > 1 and self._dirty:
            with self.phase("communication"):
                arrived = self._take_arrived(block=True)
            self._apply_drained(arrived)
            self._arrivals_at_end += arrived
        self._dirty = False
        if self.sync_best and not self._trainer_reports:
            self._best_sync = self.sync_to_best(self._progressive_accuracy(),
                                                "progressive (the epoch's last "
                                                f"{len(self._progress)} steps)")
        self._progress.clear()

    def sync_to_best(self, accuracy: float | None, source: str) -> dict:
        """Collective: every worker's ``accuracy`` (``None``: -1) gathered by an allreduce
        of a p-vector, then the parameters of the best worker (lowest rank on ties)
        broadcast to all. Returns what was done (``best_sync`` in the measurements)."""
        accuracies = np.zeros(self.size, np.float64)
        accuracies[self.rank] = -1.0 if accuracy is None else float(accuracy)
        with self.phase("communication"):
            self._channel.allreduce(accuracies, op="sum", out=accuracies)
        best = int(np.argmax(accuracies))
        if self.size > 1:
            fused = self.fused()
            buffer = fused.pack(self.fetch_parameters())
            with self.phase("communication"):
                self._channel.broadcast(buffer, root=best)
            with self.phase("update"):
                self.feed_parameters(fused.unpack())
        return {"source": source, "best_rank": best,
                "best_accuracy": float(accuracies[best]),
                "accuracies": accuracies.tolist()}

    def _record_progress(self, inputs: dict, outputs: dict) -> None:
        if not self.sync_best:
            return
        logits = outputs.get(self.output)
        labels = inputs.get(self.label) if self.label is not None else _labels_in(inputs)
        if logits is None or labels is None:
            raise Deep500Error(
                f"{self.name}: sync_best_every_epoch estimates the accuracy from the "
                f"output {self.output!r} and the labels "
                f"{self.label if self.label is not None else '(the integer input)'}, "
                f"but this step has no such "
                f"{'output' if logits is None else 'labels'}; set output: and label: "
                f"(the network's logits and the dataset's label input), or give the "
                f"scheme to the trainer as an event so that it uses the test accuracy")
        predicted = np.asarray(logits).argmax(1)
        self._progress.append((int(np.count_nonzero(predicted == labels)), labels.size))

    def _progressive_accuracy(self) -> float | None:
        counted = sum(n for _, n in self._progress)
        return sum(c for c, _ in self._progress) / counted if counted else None

    # -- the trainer's events (when the scheme is given to it as an event) -------------------
    def before_training(self, trainer, stats) -> None:
        if trainer.optimizer is self and trainer.validation_sampler is not None:
            self._trainer_reports = True

    def after_test_set(self, trainer, epoch: int, stats) -> None:
        if not (self.sync_best and self._trainer_reports):
            return
        if stats.test_accuracy is None:
            synced = self.sync_to_best(self._progressive_accuracy(), "progressive (no "
                                       "test accuracy)")
        else:
            synced = self.sync_to_best(stats.test_accuracy, "test (the trainer's "
                                       "validation pass)")
        stats.optimizer_measurements["best_sync"] = synced

    # -- measurements ------------------------------------------------------------------------
    def _reset_counters(self) -> None:
        self._steps = self._arrivals = self._arrivals_at_end = 0
        self._coalesced = self._messages = self._received = 0
        self._best_sync: dict | None = None

    def scheme_measurements(self) -> dict:
        measured = {"neighbours": list(self.neighbours),
                    "updates_sent": self._messages,
                    "messages_coalesced": self._coalesced,
                    "contributions_received": self._received,
                    "arrived_per_step": self._arrivals / self._steps if self._steps
                    else 0.0,
                    "arrived_at_epoch_end": self._arrivals_at_end}
        if self._best_sync is not None:
            measured["best_sync"] = self._best_sync
        return measured

    def end_epoch(self) -> dict:
        measured = super().end_epoch()
        self._reset_counters()
        return measured

    def analytic_traffic(self, steps: int) -> dict:
        n = self.wire_nbytes(self.fused().buffer)
        d = len(self.neighbours) if self.size > 1 else 0
        sent = received = steps * d * n
        what = "update" if self.exchange == "updates" else "copy of the parameters"
        model = (f"upper bound (asynchronous): at most one {n}-B {what} per step to each "
                 f"of {d} neighbours and as many received (coalescing sends fewer), plus "
                 f"a 0-B 'done' per neighbour and epoch")
        if self.sync_best and self.size > 1:
            gather = self.comm.allreduce_traffic(self.size, 8)
            sent += gather.bytes_sent + math.ceil(math.log2(self.size)) * n
            received += gather.bytes_received + n
            model += (f"; best-sync: the accuracy allreduce and a broadcast of {n} B "
                      f"(counted as at most ceil(log2 p) sends and one receive)")
        return {"bytes_sent": sent, "bytes_received": received, "model": model}

    # -- the end -----------------------------------------------------------------------------
    def close(self) -> None:
        """Drain what is still in flight (collective among neighbours), then free the
        scheme's communicator."""
        if self._channel is None:
            return
        if self.size > 1 and self._dirty:
            self._apply_drained(self._take_arrived(block=True))
            self._dirty = False
        self._channel.close()
        self._channel.comm.Free()
        self._channel = None


def torus_shape_default(size: int) -> tuple[int, ...]:
    """The default torus: the most square 2-D shape (``communication.torus_shape``)."""
    return torus_shape(size)


def _extents_ok(shape) -> bool:
    try:
        return all(isinstance(e, (int, np.integer)) and not isinstance(e, bool) and e >= 1
                   for e in shape) and len(shape) > 0
    except TypeError:
        return False


def _labels_in(inputs: dict):
    """The minibatch's one 1-D integer array (the labels), else ``None``."""
    found = [v for v in inputs.values()
             if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "iu"]
    return found[0] if len(found) == 1 else None
