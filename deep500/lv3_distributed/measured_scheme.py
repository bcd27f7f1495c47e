"""``MeasuredScheme``: the face a distributed optimizer shows to trainers and reports.

Whoever runs the steps (Deep500's schemes over a three-step optimizer, or a
framework's own data parallelism such as PyTorch's ``DistributedDataParallel``), a
distributed optimizer is compared by the same figures, per rank and per epoch
(``end_epoch`` returns them into ``EpochStatistics.optimizer_measurements``):

* ``phase_times``: cumulative seconds of each phase the scheme names in ``phases``
  (Deep500's schemes: ``compute``, ``communication``, ``update``);
* ``bytes_sent``, ``bytes_received``, ``messages_sent``, ``messages_received`` from
  the :class:`CommunicationNetwork`'s volume, and how they were ``counted``;
* ``message_sizes``: the sizes of the messages this rank sent, as a power-of-two
  histogram of counts and bytes whose totals are ``messages_sent`` and ``bytes_sent``
  (:mod:`~deep500.lv3_distributed.message_sizes`; A. Catalán's thesis, Fig. 5.13);
* ``replica_divergence``: ``||w_rank - mean_i w_i||_2`` over all parameters at the end
  of the epoch (zero for consistent schemes; the averaging is bookkeeping over the raw
  communicator and not counted as the scheme's traffic);
* ``rank``, ``size`` and the scheme's own ``scheme_measurements()``.

``distributed_summary`` gathers every rank's statistics at rank 0
(:func:`deep500.lv3_distributed.distributed_training.summarize`).

Telemetry: from ``_start_measuring`` until the end of training (``distributed_summary``
or ``close``) the CommunicationNetwork's counters (bytes and messages sent and
received) are a probe of the telemetry sampler (:func:`deep500.utils.telemetry.register_probe`,
name ``communication``), so a sampled run's series show them per second over time.

Timeline: after :meth:`MeasuredScheme.record_timeline` (collective), each step's phases
are recorded as events (:mod:`deep500.lv3_distributed.timeline`): ``phase()`` blocks on
their lane, and the schemes' own events (``DistributedOptimizer``: forward+backward,
update, each bucket's allreduce).

A class using it derives from ``MeasuredScheme`` before ``Optimizer``, holds the
wrapped optimizer in ``self.base``, lists its parameters in ``self.parameter_names``
(the same order on every rank), and calls :meth:`_start_measuring` in its constructor.
"""
from __future__ import annotations

import time

import numpy as np

from deep500.lv3_distributed.communication import CommunicationNetwork
from deep500.lv3_distributed.timeline import TimelineRecorder, phase_lane
from deep500.utils import telemetry

_clock = time.perf_counter
VOLUME_FIELDS = ("bytes_sent", "bytes_received", "messages_sent", "messages_received")


class MeasuredScheme:
    """Measurements, reporting and the wrapped optimizer's face of a distributed
    optimizer (a mixin; see the module docstring).

    Attributes: ``comm`` (a :class:`CommunicationNetwork`), ``rank``, ``size``,
    ``phase_times`` (cumulative seconds per phase), ``base`` (set by the subclass).
    """
    #: Whether every rank holds the same parameters after every step.
    consistent = True
    #: The phases timed in ``phase_times``, in the order of a step.
    phases: tuple[str, ...] = ("compute", "communication", "update")
    #: The phase events' recorder while a timeline is recorded (``record_timeline``).
    timeline: TimelineRecorder | None = None
    #: While ``d5.MPIProfiling`` marks phases: its ``begin_phase``/``end_phase`` are
    #: called around each timed phase (``MPI_Pcontrol`` levels a PMPI tool sees).
    phase_markers = None
    _probe = None

    def _start_measuring(self, comm=None) -> None:
        """Set ``comm`` (a CommunicationNetwork, an mpi4py communicator, or ``None``
        for the world; constructing one is collective), ``rank``, ``size``, zeroed
        ``phase_times``, and start the first epoch."""
        self.comm = comm if isinstance(comm, CommunicationNetwork) else \
            CommunicationNetwork(comm)
        self.rank, self.size = self.comm.rank, self.comm.size
        self.phase_times = dict.fromkeys(self.phases, 0.0)
        self.restart_epoch()
        self._probe = _volume_probe(self.comm.volume)
        telemetry.register_probe(PROBE_NAME, self._probe, cumulative=True)

    def _stop_probe(self) -> None:
        if self._probe is not None:
            telemetry.unregister_probe(PROBE_NAME, self._probe)
            self._probe = None

    def restart_epoch(self) -> None:
        """Count the next epoch's times and traffic from now (e.g. after set-up
        communication that the epochs should not include)."""
        self._epoch_start = self._snapshot()

    # -- the wrapped optimizer's face ---------------------------------------------------
    @property
    def name(self) -> str:
        return f"{type(self).__name__}({self.base.name})"

    @property
    def learning_rate(self):
        return getattr(self.base, "learning_rate", None)

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        self.base.learning_rate = value

    def hyperparameters(self) -> dict:
        return {**self.base.hyperparameters(), **self.scheme_hyperparameters(),
                "ranks": self.size}

    def scheme_hyperparameters(self) -> dict:
        """The scheme's own settings (e.g. averaging period), for reports."""
        return {}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "base": self.base.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict({**state, "hyperparameters": {}})
        self.base.load_state_dict(state["base"])

    # -- phases -------------------------------------------------------------------------
    def phase(self, name: str, event: str | None = None) -> "_Phase":
        """``with self.phase("communication"): ...`` adds the block's time to a phase;
        while a timeline records, the block is also an event named ``event`` (default:
        the phase's name) on the phase's lane."""
        return _Phase(self.phase_times, name, self.timeline, event, self.phase_markers)

    def _before_step(self, inputs: dict) -> None:
        if self.timeline is not None:
            self.timeline.begin_step()
        super()._before_step(inputs)

    # -- timeline -------------------------------------------------------------------------
    def record_timeline(self, capacity: int = 100_000, first_steps: int = 5,
                        every: int = 10) -> TimelineRecorder:
        """Record the phase events of the steps from now on (see
        :class:`~deep500.lv3_distributed.timeline.TimelineRecorder` for which steps).
        Collective: the ranks' clocks are aligned by barriers over the raw
        communicator (bookkeeping, not counted as the scheme's traffic)."""
        recorder = TimelineRecorder(capacity, first_steps, every)
        recorder.align(self.comm.comm if self.size > 1 else None)
        self.timeline = recorder
        return recorder

    def stop_timeline(self) -> TimelineRecorder | None:
        """Stop recording; the recorder with its events (``None`` if none recorded)."""
        recorder, self.timeline = self.timeline, None
        return recorder

    # -- epochs and measurements ----------------------------------------------------------
    def finish_epoch(self) -> None:
        """Outstanding communication at the end of an epoch (collective: every rank)."""

    def scheme_measurements(self) -> dict:
        """Scheme-specific values measured over the epoch (e.g. staleness)."""
        return {}

    def analytic_traffic(self, steps: int) -> dict | None:
        """Bytes this rank should send and receive in ``steps`` steps by the scheme's
        model (``{"bytes_sent", "bytes_received", "model"}``), or ``None``."""
        return None

    def end_epoch(self) -> dict:
        """Finish outstanding work, then return this epoch's per-rank measurements."""
        self.finish_epoch()
        now = self._snapshot()
        before, self._epoch_start = self._epoch_start, now
        if self.timeline is not None:
            self.timeline.new_epoch()
        measured = {"phase_times": {p: now["phase_times"][p] - before["phase_times"][p]
                                    for p in self.phases},
                    **{k: now[k] - before[k] for k in VOLUME_FIELDS},
                    "counted": self.comm.volume.total()["counted"],
                    "message_sizes": (now["message_sizes"]
                                      - before["message_sizes"]).to_dict(),
                    "replica_divergence": self.replica_divergence(),
                    "rank": self.rank, "size": self.size}
        measured.update(self.scheme_measurements())
        return measured

    def _snapshot(self) -> dict:
        total = self.comm.volume.total()
        return {"phase_times": dict(self.phase_times),
                **{k: total[k] for k in VOLUME_FIELDS},
                "message_sizes": self.comm.volume.message_sizes()}

    def fetch_parameters(self) -> dict:
        network = self.network
        return {name: network.fetch_tensor(name) for name in self.parameter_names}

    def replica_divergence(self) -> float:
        """``||w_rank - mean_i w_i||_2`` over all parameters (collective; bookkeeping
        over the raw communicator, not counted as the scheme's traffic)."""
        if self.size == 1:
            return 0.0
        values = self.fetch_parameters()
        mine = np.concatenate([np.asarray(values[n], np.float64).ravel()
                               for n in self.parameter_names])
        mean = np.empty_like(mine)
        self.comm.comm.Allreduce(mine, mean)
        mean /= self.size
        return float(np.linalg.norm(mine - mean))

    @property
    def stops_together(self) -> bool:
        return self.size > 1

    def agree_to_stop(self, reason: str | None) -> str | None:
        """Every rank's reason to stop gathered on every rank (collective; bookkeeping
        over the raw communicator, not counted as the scheme's traffic); the lowest
        rank's reason wins, so all ranks stop together or none does."""
        if self.size == 1:
            return reason
        for rank, wanted in enumerate(self.comm.comm.allgather(reason)):
            if wanted is not None:
                return f"{wanted} (on rank {rank})"
        return None

    def close(self) -> None:
        """Free what the scheme holds in MPI (communicators it duplicated). Collective:
        call it on every rank, after the last step; the wrapped ``comm`` stays usable.
        Here it ends the telemetry probe (as ``distributed_summary`` does)."""
        self._stop_probe()

    def distributed_summary(self, statistics) -> dict | None:
        """Every rank's statistics gathered at rank 0 with global figures (see
        :func:`deep500.lv3_distributed.distributed_training.summarize`); ``None`` on
        other ranks. Collective."""
        from deep500.lv3_distributed.distributed_training import summarize
        self._stop_probe()  # training is over
        return summarize(self, statistics)

    def __repr__(self) -> str:
        return f"{self.name} on rank {self.rank} of {self.size}"


PROBE_NAME = "communication"


def _volume_probe(volume):
    """A telemetry probe of a CommunicationVolume's totals (bytes and messages)."""
    def probe() -> dict:
        total = volume.total()
        return {key: total[key] for key in VOLUME_FIELDS}
    return probe


class _Phase:
    __slots__ = ("times", "name", "started", "timeline", "event", "markers")

    def __init__(self, times: dict, name: str, timeline=None, event: str | None = None,
                 markers=None):
        self.times, self.name, self.timeline, self.event = times, name, timeline, event
        self.markers = markers

    def __enter__(self):
        if self.markers is not None:
            self.markers.begin_phase(self.name)
        self.started = _clock()
        return self

    def __exit__(self, *exc):
        ended = _clock()
        if self.markers is not None:
            self.markers.end_phase(self.name)
        self.times[self.name] += ended - self.started
        if self.timeline is not None:
            self.timeline.add(self.event or self.name, phase_lane(self.name),
                              self.started, ended)
        return False
