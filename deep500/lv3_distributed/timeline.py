"""Per-rank phase events of a distributed scheme, exported as a Chrome trace.

Like Horovod's timeline (``HOROVOD_TIMELINE``), a run can record when each rank
computed (forward and backward), communicated (the blocking allreduce, and for
overlapped steps each bucket's ``MPI_Iallreduce`` from its start to the moment the rank
saw it complete) and updated, and write the events in the Trace Event Format that
``chrome://tracing`` and Perfetto (ui.perfetto.dev) open: ``{"traceEvents": [...]}``
with complete events (``"ph": "X"``, ``ts`` and ``dur`` in microseconds), ``pid`` =
rank and ``tid`` = lane (Google, "Trace Event Format", 2016).

Lanes (``tid``): ``compute`` (forward and backward, the update, and the compute-only
passes that measure exposed communication), ``communication`` (the blocking
allreduce, the wait for the buckets, a scheme's other communication phases) and
``bucket k`` for the k-th bucket of an overlapped step (buckets can be in flight at
the same time; one lane each, as Horovod gives each tensor its own row).

**Cost.** Recording appends a name, a lane and two ``perf_counter`` readings to
preallocated lists (a few hundred nanoseconds per event); when the recorder is off
the schemes test one attribute. Not every step is recorded: the first
``first_steps`` of each epoch and then every ``every``-th one (its step index within
the epoch a multiple of ``every``), up to ``capacity`` events in all (later ones are
counted in ``dropped``). ``benchmarks/lv3_telemetry_overhead.py`` measures the cost.

**Common clock.** Each rank's timestamps are ``perf_counter`` seconds since its
*origin*: the moment it left two ``MPI_Barrier`` calls when recording started (the
second barrier starts all ranks within about one message latency of each other;
``perf_counter`` is CLOCK_MONOTONIC, whose rate is the same on every node). Ranks are
thus aligned to within the barrier's exit skew (microseconds on one node, a network
latency across nodes), which is drawn as each rank's ``origin_unix`` in the trace's
``otherData``.
"""
from __future__ import annotations

import json
import os
import time

from deep500.utils.errors import Deep500Error

_clock = time.perf_counter

COMPUTE, COMMUNICATION, FIRST_BUCKET = 0, 1, 2
LANE_NAMES = {COMPUTE: "compute", COMMUNICATION: "communication"}


def lane_name(lane: int) -> str:
    """The name of lane ``lane`` (``tid``)."""
    return LANE_NAMES.get(lane) or f"bucket {lane - FIRST_BUCKET}"


# Phases without communication: the reference schemes' compute and update, PyTorch
# DDP's forward, TensorFlow MultiWorkerMirroredStrategy's forward_backward.
COMPUTE_PHASES = ("compute", "update", "forward", "backward", "forward_backward")


def phase_lane(phase: str) -> int:
    """The lane of a scheme's phase: :data:`COMPUTE_PHASES` on ``compute``, the rest
    (communication, or computation overlapped with it, as DDP's backward_allreduce) on
    ``communication``."""
    return COMPUTE if phase in COMPUTE_PHASES else COMMUNICATION


def _positive_int(value, what: str, zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
        raise Deep500Error(f"Timeline: {what}={value!r}: give an integer >= "
                           f"{0 if zero else 1}")
    return value


class TimelineRecorder:
    """Phase events of one rank (see the module docstring).

    A scheme calls :meth:`begin_step` at the start of each step and :meth:`new_epoch`
    at the end of each epoch; while ``on`` (a recorded step) it calls :meth:`add`.

    Args:
        capacity: the most events kept (preallocated); later ones are dropped.
        first_steps: steps recorded at the start of every epoch.
        every: after those, every ``every``-th step of the epoch (0: none).
    """

    def __init__(self, capacity: int = 100_000, first_steps: int = 5, every: int = 10):
        self.capacity = _positive_int(capacity, "capacity")
        self.first_steps = _positive_int(first_steps, "first_steps", zero=True)
        self.every = _positive_int(every, "every", zero=True)
        self.names: list = [None] * self.capacity
        self.lanes = [0] * self.capacity
        self.starts = [0.0] * self.capacity
        self.ends = [0.0] * self.capacity
        self.steps = [0] * self.capacity
        self.count = 0
        self.dropped = 0
        self.on = False
        self.epoch = 0
        self.step = -1              # index of the current step within its epoch
        self.steps_recorded = 0
        self.origin = _clock()      # replaced by align()
        self.origin_unix = time.time()

    def align(self, mpi_comm=None) -> None:
        """Set the origin of this rank's clock after two barriers of ``mpi_comm`` (an
        mpi4py communicator; collective), or now without one."""
        if mpi_comm is not None:
            mpi_comm.Barrier()
            mpi_comm.Barrier()
        self.origin = _clock()
        self.origin_unix = time.time()

    def begin_step(self) -> None:
        """A step starts: record it if it is one of the epoch's recorded steps."""
        self.step = step = self.step + 1
        self.on = step < self.first_steps or (self.every > 0 and step % self.every == 0)
        if self.on:
            self.steps_recorded += 1

    def new_epoch(self) -> None:
        """The epoch ended: the next step is step 0 of the next epoch."""
        self.epoch += 1
        self.step = -1
        self.on = False

    def add(self, name: str, lane: int, start: float, end: float) -> None:
        """Event ``name`` on ``lane`` from ``start`` to ``end`` (``perf_counter``
        seconds); kept only while ``on`` and below ``capacity``."""
        if not self.on:
            return
        i = self.count
        if i >= self.capacity:
            self.dropped += 1
            return
        self.names[i] = name
        self.lanes[i] = lane
        self.starts[i] = start
        self.ends[i] = end
        self.steps[i] = self.epoch << 32 | self.step
        self.count = i + 1

    def payload(self, rank: int) -> dict:
        """This rank's events, compact, for gathering: times in microseconds since
        the origin."""
        n, origin = self.count, self.origin
        return {"rank": rank, "origin_unix": self.origin_unix, "dropped": self.dropped,
                "steps_recorded": self.steps_recorded,
                "names": self.names[:n], "lanes": self.lanes[:n],
                "ts": [round((s - origin) * 1e6, 3) for s in self.starts[:n]],
                "dur": [round((e - s) * 1e6, 3)
                        for s, e in zip(self.starts[:n], self.ends[:n])],
                "steps": self.steps[:n]}


def chrome_trace(payloads: list[dict], metadata: dict | None = None) -> dict:
    """The Trace Event Format document of the ranks' ``payload()``: per rank a
    ``process_name`` ("rank r") and per lane a ``thread_name`` metadata event, then one
    complete event (``ph: X``) per recorded event with ``args`` epoch and step."""
    events = []
    for payload in payloads:
        rank = payload["rank"]
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"name": f"rank {rank}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for lane in sorted(set(payload["lanes"]) | {COMPUTE}):
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": lane,
                           "args": {"name": lane_name(lane)}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": rank,
                           "tid": lane, "args": {"sort_index": lane}})
        for name, lane, ts, dur, step in zip(payload["names"], payload["lanes"],
                                             payload["ts"], payload["dur"],
                                             payload["steps"]):
            events.append({"name": name, "cat": lane_name(lane), "ph": "X", "ts": ts,
                           "dur": dur, "pid": rank, "tid": lane,
                           "args": {"epoch": step >> 32, "step": step & 0xFFFFFFFF}})
    other = {"clock": "perf_counter since each rank's origin (two MPI barriers)",
             "origin_unix": {str(p["rank"]): p["origin_unix"] for p in payloads},
             "dropped": {str(p["rank"]): p["dropped"] for p in payloads},
             **(metadata or {})}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_chrome_trace(path: str, payloads: list[dict], metadata: dict | None = None) -> str:
    """Write :func:`chrome_trace` to ``path`` (folders created); returns the path."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w") as handle:
        json.dump(chrome_trace(payloads, metadata), handle, separators=(",", ":"))
    return path


class TimedComm:
    """Stands in for a :class:`CommunicationNetwork` where a scheme's gradient buckets
    start their exchanges: while ``owner.timeline`` records, each ``iallreduce`` (or
    any request posted through :meth:`timed`) becomes the event ``allreduce bucket k``
    (``<what> bucket k``) on lane ``bucket k``, from its start to the moment this rank
    saw it complete (``test()`` true or ``wait()`` returned; MPI completes a rank's
    part of a collective inside those calls). Everything else is the wrapped
    network's."""

    def __init__(self, comm, owner):
        self._comm = comm
        self._owner = owner
        self._key = None
        self._index = 0

    def iallreduce(self, *args, **kwargs):
        return self.timed("allreduce", lambda: self._comm.iallreduce(*args, **kwargs))

    def timed(self, what: str, post):
        """``post()`` (which starts a non-blocking exchange and returns its request),
        timed as the bucket event ``<what> bucket k`` while a timeline records."""
        recorder = self._owner.timeline
        if recorder is None or not recorder.on:
            return post()
        key = (recorder.epoch, recorder.step)
        if key != self._key:
            self._key, self._index = key, 0
        index, self._index = self._index, self._index + 1
        started = _clock()
        return _TimedRequest(post(), recorder, index, started, what)

    def __getattr__(self, name):
        return getattr(self._comm, name)


class _TimedRequest:
    __slots__ = ("request", "recorder", "index", "started", "pending", "what")

    def __init__(self, request, recorder, index, started, what):
        self.request, self.recorder = request, recorder
        self.index, self.started, self.pending, self.what = index, started, True, what

    def _done(self) -> None:
        self.pending = False
        self.recorder.add(f"{self.what} bucket {self.index}", FIRST_BUCKET + self.index,
                          self.started, _clock())

    def test(self) -> bool:
        done = self.request.test()
        if done and self.pending:
            self._done()
        return done

    def wait(self):
        result = self.request.wait()
        if self.pending:
            self._done()
        return result
