"""``d5.DistributedOptimizer``: any three-step optimizer, made distributed by wrapping.

As a Horovod user wraps ``torch.optim.SGD``, a Deep500 user wraps any
:class:`~deep500.lv2_training.optimizer.ThreeStepOptimizer` (or update-rule optimizer):
the scheme reaches between the three steps of the paper (Ben-Nun et al., IPDPS 2019,
Section IV-D): it runs ``base.compute_gradients`` (new input, prepare parameters,
forward and backpropagation), communicates gradients or parameters, and runs
``base.apply_gradients`` (the update rule) where and when the scheme says. The base
optimizer's state (momentum, moments) and hyper-parameters stay in the base optimizer;
schedules that set ``learning_rate`` on the wrapper reach it.

What is measured, per rank (``end_epoch`` returns it for each epoch, so it lands in
``EpochStatistics.optimizer_measurements``):

* per-phase time of the steps: ``compute`` (new input, prepare parameters, forward and
  backpropagation, gradient modifiers), ``communication``, ``update`` (the update rule
  and writing parameters back); the trainer measures data loading separately;
* bytes and messages sent and received (the :class:`CommunicationNetwork` counters);
* ``replica_divergence``: ``||w_rank - mean_i w_i||_2`` over all parameters at the end
  of the epoch (zero for consistent schemes; the averaging is bookkeeping and not
  counted as the scheme's traffic);
* scheme-specific values (e.g. the staleness histogram of an asynchronous parameter
  server).

Parameters travel fused: one contiguous buffer of all parameters (or gradients) in the
network's parameter order, so a step costs one collective rather than one per tensor
(as Horovod's tensor fusion).

Compressed communication: ``comm_dtype="float16"`` or ``"bfloat16"`` (every scheme's
constructor option; default ``"float32"``) sends the fused values in 16 bits and does
the arithmetic in float32 (:mod:`~deep500.lv3_distributed.wire_dtype`,
:mod:`~deep500.lv3_distributed.compressed_allreduce`): the bytes counted are half of
float32's, and ``analytic_traffic`` uses the wire's itemsize. Narrowing and widening are
part of the ``communication`` phase.

Overlap: ``overlap=True`` (data-parallel SGD, i.e. this class used directly and
``d5ref.ConsistentDecentralized``) starts one ``MPI_Iallreduce`` per bucket of
``bucket_bytes`` as backpropagation completes the gradients, in reverse layer order, and
waits for all before the update (:mod:`~deep500.lv3_distributed.gradient_buckets`). It
needs an executor that reports gradients early (``reports_gradients_early``: the
reference and PyTorch executors) and no gradient modifiers (they act on the whole
gradient after backprop). Schemes whose algorithm is not a data-parallel allreduce set
``cannot_overlap`` and refuse ``overlap=True`` with a ``Deep500Error``.

Exposed communication (``exposed_communication`` in each epoch's measurements, seconds
per step): the median step time (from the start of forward to the averaged gradients,
the update excluded) minus the median compute-only time of forward and backprop, the
method of the Intel MPI Benchmarks' non-blocking tests (IMB-NBC: overlapped time
against the pure compute time). Blocking, the compute phase of each step is that
compute-only time (nothing is in flight during it); overlapped, the scheme times an
extra forward and backward pass without communication before every
``compute_only_every``-th step of an epoch, from its second on (spread over the epoch,
so that a change in the machine's load reaches both samples alike; not counted in the
phases; they change no parameter; about 1/``compute_only_every`` more compute; an
epoch of one step has no ``exposed_communication``).

Timeline (``record_timeline``, see :mod:`~deep500.lv3_distributed.timeline`): each
recorded step's ``forward+backward`` and ``update`` (lane ``compute``), the blocking
``allreduce`` or, overlapped, ``allreduce bucket k`` from each bucket's start to its
completion (lane ``bucket k``) and the ``wait for buckets`` (lane ``communication``),
and the overlapped scheme's ``compute-only pass``.
"""
from __future__ import annotations

import time

import numpy as np

from deep500.lv2_training.optimizer import Optimizer, ThreeStepOptimizer
from deep500.lv2_training.optimizer import modifies_gradients
from deep500.lv3_distributed.gradient_buckets import (DEFAULT_BUCKET_BYTES,
                                                      GradientBuckets, check_bucket_bytes)
from deep500.lv3_distributed.measured_scheme import MeasuredScheme
from deep500.lv3_distributed.progress_thread import check_progress
from deep500.lv3_distributed.timeline import COMPUTE, TimedComm
from deep500.lv3_distributed.volume import ring_allreduce_traffic
from deep500.lv3_distributed.wire_dtype import check_comm_dtype, wire_type
from deep500.utils.errors import Deep500Error

_clock = time.perf_counter
PHASES = MeasuredScheme.phases


class FusedBuffer:
    """One contiguous array holding several named arrays back to back (in the order
    given), with views to read and write each one.

    ``phase_times``: a scheme's ``phase_times``; the copies of :meth:`pack` are then
    added to its ``"communication"`` phase (fusing tensors is part of exchanging them,
    as in Horovod's fusion buffer, and can cost as much as a small allreduce)."""

    def __init__(self, like: dict, phase_times: dict | None = None):
        self.phase_times = phase_times
        arrays = {name: np.asarray(value) for name, value in like.items()}
        if not arrays:
            raise Deep500Error("Nothing to communicate: the network has no parameters")
        dtype = np.result_type(*arrays.values())
        if dtype.kind not in "fc":
            raise Deep500Error(f"Distributed optimizers average floating-point "
                               f"parameters; the network's parameters are {dtype}")
        self.names = list(arrays)
        self.shapes = {name: arrays[name].shape for name in self.names}
        sizes = [arrays[name].size for name in self.names]
        self.offsets = dict(zip(self.names, np.cumsum([0] + sizes[:-1]).tolist()))
        self.buffer = np.empty(int(sum(sizes)), dtype)
        self.views = {name: self.buffer[self.offsets[name]:self.offsets[name] + size]
                      .reshape(self.shapes[name])
                      for name, size in zip(self.names, sizes)}

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    def pack(self, arrays: dict) -> np.ndarray:
        """Copy ``arrays`` (``{name: array}``, every name of this buffer) into it."""
        started = _clock()
        for name, view in self.views.items():
            np.copyto(view, arrays[name], casting="same_kind")
        if self.phase_times is not None:
            self.phase_times["communication"] += _clock() - started
        return self.buffer

    def unpack(self, buffer: np.ndarray | None = None) -> dict:
        """``{name: view}`` into ``buffer`` (default: this buffer); no copies."""
        if buffer is None:
            return self.views
        return {name: buffer[self.offsets[name]:self.offsets[name] + view.size]
                .reshape(view.shape) for name, view in self.views.items()}


class DistributedOptimizer(MeasuredScheme, Optimizer):
    """Base class of distributed schemes wrapping ``base_optimizer`` (a
    ThreeStepOptimizer on this rank's executor) and communicating over ``comm`` (a
    :class:`CommunicationNetwork`, an mpi4py communicator, or ``None`` for the world).

    Used directly, it is data-parallel SGD, as ``horovod.DistributedOptimizer``: each
    step allreduce-averages the fused gradients (``comm``'s default allreduce) and every
    rank applies the same update (``d5ref.ConsistentDecentralized`` is this, with the
    allreduce algorithm as an option).

    Other schemes implement :meth:`step` from the parts :meth:`compute_gradients`,
    :meth:`apply_gradients`, :meth:`fetch_parameters` and :meth:`feed_parameters`,
    time communication with ``self.phase("communication")``, and may override
    :meth:`finish_epoch` (outstanding work at the end of an epoch),
    :meth:`scheme_measurements` and :meth:`analytic_traffic`.

    ``comm_dtype``: ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``: the
    number format of the values on the wire (see the module docstring); the arithmetic
    stays float32. A scheme passes it on to this constructor and uses ``self.wire``
    (``None`` for float32, else a :class:`~deep500.lv3_distributed.wire_dtype.WireType`).

    ``overlap``: overlap the allreduce with backprop, one ``MPI_Iallreduce`` per bucket
    of at least ``bucket_bytes`` bytes (see the module docstring); when overlapping, a
    compute-only forward and backward pass before every ``compute_only_every``-th step
    measures the compute-only time of ``exposed_communication`` (0: not measured).
    ``progress`` (overlapping): ``"calls"`` (default; MPI progresses inside the
    ``MPI_Test`` after each backward node) or ``"thread"`` (a background thread also
    tests every half millisecond while buckets are in flight;
    :mod:`~deep500.lv3_distributed.progress_thread`).

    Attributes: ``base``, ``comm``, ``rank``, ``size``, ``parameter_names`` (the same
    order on every rank), ``phase_times`` (cumulative seconds per phase), ``comm_dtype``,
    ``wire``, ``overlap``, ``bucket_bytes``.
    """
    #: Why the scheme cannot overlap its communication with backprop (``None``: it can).
    cannot_overlap: str | None = None

    def __init__(self, base_optimizer: ThreeStepOptimizer, comm=None,
                 comm_dtype: str = "float32", overlap: bool = False,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, compute_only_every: int = 10,
                 progress: str = "calls"):
        self.comm_dtype = check_comm_dtype(comm_dtype, f"{type(self).__name__}: "
                                                       f"comm_dtype")
        self.wire = wire_type(comm_dtype)
        self.overlap = type(self).check_overlap(overlap, bucket_bytes)
        self.bucket_bytes = check_bucket_bytes(bucket_bytes,
                                               f"{type(self).__name__}: bucket_bytes")
        if (isinstance(compute_only_every, bool) or
                not isinstance(compute_only_every, (int, np.integer)) or
                compute_only_every < 0):
            raise Deep500Error(f"{type(self).__name__}: compute_only_every="
                               f"{compute_only_every!r}: give a number of steps >= 1, or "
                               f"0 not to measure exposed communication")
        self.compute_only_every = int(compute_only_every)
        self.progress = check_progress(progress, f"{type(self).__name__}: progress")
        self._step_seconds: list[float] = []
        self._compute_only_seconds: list[float] = []
        if isinstance(base_optimizer, DistributedOptimizer):
            raise Deep500Error(f"{type(self).__name__}: the base optimizer is already "
                               f"distributed ({base_optimizer.name}); wrap the local "
                               f"optimizer once")
        if not isinstance(base_optimizer, ThreeStepOptimizer):
            raise Deep500Error(
                f"{type(self).__name__} wraps a three-step or update-rule optimizer (e.g. "
                f"d5ref.GradientDescent); got {type(base_optimizer).__name__}. "
                f"Framework-native optimizers run their own step and cannot be wrapped; "
                f"use the framework's distributed baseline instead")
        super().__init__(base_optimizer.executor, base_optimizer.loss)
        self.base = base_optimizer
        self.events = base_optimizer.events       # one list: gradient modifiers run once
        self.parameter_names = list(base_optimizer.parameters())
        if self.overlap and not getattr(self.executor, "reports_gradients_early", False):
            raise Deep500Error(
                f"{type(self).__name__}: overlap=True needs an executor that reports each "
                f"gradient as backprop completes it (per-node backward hooks: the "
                f"reference executor, the PyTorch executors); "
                f"{type(self.executor).__name__} does not. Use overlap=False, or one of "
                f"those executors")
        self._start_measuring(comm)
        self._fused: FusedBuffer | None = None
        self._buckets: GradientBuckets | None = None

    @classmethod
    def check_overlap(cls, overlap, bucket_bytes=DEFAULT_BUCKET_BYTES) -> bool:
        """``overlap`` as a bool; ``Deep500Error`` if it is not one, if the scheme cannot
        overlap (``cannot_overlap`` says why), or if ``bucket_bytes`` is not a positive
        integer."""
        if not isinstance(overlap, (bool, np.bool_)):
            raise Deep500Error(f"{cls.__name__}: overlap={overlap!r}: give true or false")
        check_bucket_bytes(bucket_bytes, f"{cls.__name__}: bucket_bytes")
        if overlap and cls.cannot_overlap:
            raise Deep500Error(f"{cls.__name__}: overlap=True: {cls.cannot_overlap}. Use "
                               f"overlap=False, or ConsistentDecentralized "
                               f"(data-parallel SGD) with overlap=True")
        return bool(overlap)

    @classmethod
    def check_options(cls, comm_dtype: str = "float32", overlap: bool = False,
                      bucket_bytes: int = DEFAULT_BUCKET_BYTES, progress: str = "calls",
                      **_options) -> None:
        """The checks of the constructor that need no MPI (a recipe calls this up
        front): ``comm_dtype``, ``overlap``, ``bucket_bytes`` and ``progress``."""
        check_comm_dtype(comm_dtype, f"{cls.__name__}: comm_dtype")
        check_progress(progress, f"{cls.__name__}: progress")
        cls.check_overlap(overlap, bucket_bytes)

    def hyperparameters(self) -> dict:
        chosen = super().hyperparameters()
        if self.wire is not None:
            chosen["comm_dtype"] = self.comm_dtype
        if self.overlap:
            chosen.update(overlap=True, bucket_bytes=self.bucket_bytes)
            if self.progress != "calls":
                chosen["progress"] = self.progress
        return chosen

    @property
    def iallreduce_options(self) -> dict:
        """The keywords of the overlapped buckets' ``comm.iallreduce``: the wire's, and
        a scheme's algorithm where it has one (``MPI_Iallreduce`` otherwise)."""
        return dict(self.wire_options)

    @property
    def wire_options(self) -> dict:
        """Keywords of ``comm.allreduce`` / ``iallreduce`` for this ``comm_dtype``
        (none for float32, whose calls stay as they were)."""
        return {} if self.wire is None else {"wire_dtype": self.comm_dtype}

    def wire_itemsize(self, buffer: np.ndarray) -> int:
        """Bytes a value of ``buffer`` takes on the wire."""
        return buffer.itemsize if self.wire is None else self.wire.itemsize

    def wire_nbytes(self, buffer: np.ndarray) -> int:
        """Bytes ``buffer`` takes on the wire."""
        return buffer.size * self.wire_itemsize(buffer)

    # -- parts of a step ------------------------------------------------------------------
    def compute_gradients(self, inputs: dict) -> tuple[dict, dict]:
        """The base optimizer's steps 1 and 2, forward and backpropagation (timed as
        ``compute``); returns ``(outputs, {parameter: gradient})``."""
        markers = self.phase_markers
        if markers is not None:
            markers.begin_phase("compute")
        started = _clock()
        outputs, gradients = self.base.compute_gradients(inputs)
        ended = _clock()
        if markers is not None:
            markers.end_phase("compute")
        self._last_compute = ended - started
        self.phase_times["compute"] += self._last_compute
        if self.timeline is not None:
            self.timeline.add("forward+backward", COMPUTE, started, ended)
        return outputs, gradients

    def apply_gradients(self, gradients: dict) -> None:
        """The base optimizer's update rule for each parameter (timed as ``update``)."""
        markers = self.phase_markers
        if markers is not None:
            markers.begin_phase("update")
        started = _clock()
        self.base.apply_gradients(gradients)
        self.base.step_count += 1
        ended = _clock()
        if markers is not None:
            markers.end_phase("update")
        self.phase_times["update"] += ended - started
        if self.timeline is not None:
            self.timeline.add("update", COMPUTE, started, ended)

    def fused(self) -> FusedBuffer:
        """The fusion buffer shaped like the parameters (created on first use)."""
        if self._fused is None:
            self._fused = self.new_fused_buffer()
        return self._fused

    def packed_gradients(self, inputs: dict) -> tuple[dict, FusedBuffer, np.ndarray]:
        """The start of a step that communicates the gradients as one buffer: the
        events before a step, forward and backpropagation, and the gradients packed
        into the fusion buffer. Returns ``(outputs, fused buffer, packed array)``."""
        self._before_step(inputs)
        outputs, gradients = self.compute_gradients(inputs)
        fused = self.fused()
        return outputs, fused, fused.pack(gradients)

    def new_fused_buffer(self) -> FusedBuffer:
        """Another fusion buffer shaped like the parameters, its packing timed."""
        return FusedBuffer(self.fetch_parameters(), self.phase_times)

    def feed_parameters(self, values: dict) -> None:
        network = self.network
        for name in self.parameter_names:
            network.feed_tensor(name, np.array(values[name], copy=True), is_param=True)

    def ring_allreduce_traffic(self, calls: int, model: str) -> dict:
        """``analytic_traffic`` of ``calls`` ring allreduces of the fused buffer
        (2(p-1)/p x n bytes each way per rank; ``model`` says what is reduced)."""
        fused = self.fused()
        one = ring_allreduce_traffic(fused.buffer.size, self.wire_itemsize(fused.buffer),
                                     self.size, self.rank)
        return {"bytes_sent": calls * one.bytes_sent,
                "bytes_received": calls * one.bytes_received,
                "model": f"{model}: ring allreduce of {self.wire_nbytes(fused.buffer)} B"
                         f"{self._wire_note()}, 2(p-1)/p x n per rank each way"}

    def _wire_note(self) -> str:
        return "" if self.wire is None else f" ({self.comm_dtype} on the wire)"

    #: The allreduce of the default step: an ``AllreduceAlgorithm`` looked up once, or a
    #: name (``None``: ``comm.allreduce_algorithm``).
    allreduce_algorithm = None
    #: Further keywords of that allreduce (``segment_bytes``, ``mpi_algorithm``).
    allreduce_options: dict = {}

    def step(self, inputs: dict) -> dict:
        """Data-parallel SGD: average the gradients over the ranks, update everywhere."""
        if self.overlap:
            return self._overlapped_step(inputs)
        started = _clock()
        outputs, fused, buffer = self.packed_gradients(inputs)
        with self.phase("communication", "allreduce"):
            self.comm.allreduce(buffer, op="average", out=buffer,
                                algorithm=self.allreduce_algorithm,
                                **self.allreduce_options, **self.wire_options)
        self._step_seconds.append(_clock() - started)
        self._compute_only_seconds.append(self._last_compute)
        self.apply_gradients(fused.unpack())
        return self._finish_step(inputs, outputs)

    def _overlapped_step(self, inputs: dict) -> dict:
        """Data-parallel SGD with one non-blocking allreduce per gradient bucket, started
        during backprop (``GradientBuckets``) and waited for before the update."""
        outputs, averaged = self.overlapped_gradients(inputs)
        self.apply_gradients({name: averaged[name] for name in self.parameter_names})
        return self._finish_step(inputs, outputs)

    def overlapped_gradients(self, inputs: dict) -> tuple[dict, dict]:
        """Forward and backprop with one :meth:`bucket_exchange` per gradient bucket,
        started as backprop completes it, all waited for: ``(outputs, {parameter:
        exchanged gradient})`` (views into the bucket buffers). Times the step and,
        every ``compute_only_every`` steps, a compute-only pass (``exposed_communication``)."""
        modifiers = [type(e).__name__ for e in self.events if modifies_gradients(e)]
        if modifiers:
            raise Deep500Error(
                f"{self.name}: overlap=True sends each gradient as backprop completes it, "
                f"but the gradient modifiers {modifiers} change the whole gradient after "
                f"backprop; use overlap=False, or drop the modifiers")
        self._before_step(inputs)
        buckets = self._gradient_buckets()
        # From the epoch's second step (its first pays for allocations), spread out.
        done = len(self._step_seconds)
        if self.compute_only_every and done and (done - 1) % self.compute_only_every == 0:
            started = _clock()
            self.executor.inference_and_backprop(inputs, self.loss)
            ended = _clock()
            self._compute_only_seconds.append(ended - started)
            if self.timeline is not None:
                self.timeline.add("compute-only pass", COMPUTE, started, ended)
        hooks_before = buckets.hook_seconds
        started = _clock()
        buckets.start_step()
        try:
            outputs, gradients = self.compute_gradients(inputs)
        except BaseException:
            buckets.active = False
            raise
        in_hooks = buckets.hook_seconds - hooks_before
        # The hooks' packing, starting and testing is communication work.
        self.phase_times["compute"] -= in_hooks
        self.phase_times["communication"] += in_hooks
        with self.phase("communication", "wait for buckets"):
            averaged = buckets.finish(gradients)
        self._step_seconds.append(_clock() - started)
        return outputs, averaged

    def bucket_exchange(self, comm, buffer: np.ndarray):
        """Start one bucket's exchange of an overlapped step and return its request;
        ``buffer`` holds the result when it completes. Data-parallel SGD: the
        allreduce-average of the scheme's algorithm (``iallreduce_options``)."""
        return comm.iallreduce(buffer, op="average", out=buffer, **self.iallreduce_options)

    def _gradient_buckets(self) -> GradientBuckets:
        if self._buckets is None:
            # TimedComm: each bucket's allreduce is a timeline event while one records.
            self._buckets = GradientBuckets(TimedComm(self.comm, self),
                                            self.fetch_parameters(),
                                            self.bucket_bytes, self.iallreduce_options,
                                            self.progress, self.bucket_exchange)
            self.executor.events.append(self._buckets)
        return self._buckets

    def close(self) -> None:
        if self._buckets is not None:
            self._buckets.close()
        super().close()

    def restart_epoch(self) -> None:
        super().restart_epoch()
        self._step_seconds, self._compute_only_seconds = [], []

    def end_epoch(self) -> dict:
        measured = super().end_epoch()
        measured.update(self.exposed_measurements())
        self._step_seconds, self._compute_only_seconds = [], []
        return measured

    def exposed_measurements(self) -> dict:
        """This epoch's ``exposed_communication`` (seconds per step: median step time
        without the update minus median compute-only time; see the module docstring),
        with ``step_seconds_median``, ``compute_only_seconds_median``, ``overlap`` and,
        overlapped, ``buckets`` per step. Empty for schemes with their own step."""
        if not self._step_seconds or not self._compute_only_seconds:
            return {}
        step = float(np.median(self._step_seconds))
        compute = float(np.median(self._compute_only_seconds))
        measured = {"exposed_communication": step - compute,
                    "step_seconds_median": step, "compute_only_seconds_median": compute,
                    "overlap": self.overlap}
        if self.overlap and self._buckets is not None:
            measured["buckets"] = self._buckets.buckets
        return measured

    def analytic_traffic(self, steps: int) -> dict | None:
        if type(self).step is not DistributedOptimizer.step:
            return None   # a scheme with its own step states its own model
        return self.ring_allreduce_traffic(steps, "the gradients, every step")

    def _finish_step(self, inputs: dict, outputs: dict) -> dict:
        self.step_count += 1
        self._after_step(inputs, outputs)
        return outputs
