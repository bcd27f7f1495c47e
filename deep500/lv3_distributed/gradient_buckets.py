"""Layer-wise overlap of the gradient allreduce with backpropagation.

As PyDTNN (a non-blocking allreduce per layer, started as soon as backprop has computed
that layer's gradient; Barrachina et al., JPDC 2023), Horovod's tensor fusion and
PyTorch DDP's gradient buckets (Li et al., VLDB 2020): while the executor runs the
backward pass, each parameter's gradient is handed over as soon as it is complete
(executors call :meth:`GradientBuckets.gradient_ready`; see "Executors" below). The
gradients join a bucket in the order they arrive (reverse layer order); when a bucket
holds at least ``bucket_bytes`` it is packed into its own contiguous buffer and its
``MPI_Iallreduce`` starts (``CommunicationNetwork.iallreduce``). After the backward pass
the rest forms the last bucket, and :meth:`GradientBuckets.finish` waits for every
bucket and returns the averaged gradients (views into the bucket buffers) before the
update. Several buckets may be in flight; MPI runs the collectives of one communicator
in the order they were started. Every rank forms the same buckets: the arrival order
is the executor's backward order, the same on every rank.

Each element's sum is formed by MPI exactly as in one allreduce of the whole gradient,
up to the association MPI's algorithm picks for the bucket's size; with two ranks a sum
has one addition (a + b = b + a in IEEE arithmetic), so the parameters equal those of
the blocking scheme bit for bit.

**MPI progress.** MPICH (without an asynchronous progress thread) advances a
non-blocking collective only inside MPI calls. After each node's backward the executor
calls :meth:`GradientBuckets.backward_progress`, which calls ``MPI_Test`` on the oldest
outstanding bucket: that call runs MPICH's progress engine, which moves every pending
collective forward. This is what PyDTNN's progress calls do. A long backward node
(a convolution) leaves a gap with no call, in which a network that moves bytes by itself
(TCP in the kernel, an RDMA NIC) finishes the posted messages and idles; with
``progress="thread"`` a :class:`~deep500.lv3_distributed.progress_thread.ProgressThread`
also tests every half millisecond while buckets are in flight (as Horovod's background
thread), so the next messages are posted in time.

**Executors.** An executor that can report gradients early sets
``reports_gradients_early = True`` and, for each event with ``wants_gradients``, calls
``gradient_ready(parameter name, gradient array)`` once per parameter per backward pass
when that gradient is complete, and ``backward_progress()`` after each node's backward:
the reference executor after the backward of the first node in graph order that reads
the parameter (``step_profile.gradient_owners``), the PyTorch executors from each
parameter's post-accumulate-grad hook. Parameters the loss does not reach are not
reported: their gradients (zeros) join the last bucket.

Time spent in the hooks (packing, starting collectives, ``MPI_Test``) is
communication work on the critical path; :attr:`GradientBuckets.hook_seconds`
accumulates it so that the scheme moves it from its compute phase to its communication
phase.
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

from deep500.lv1_network.events import ExecutorEvent
from deep500.lv3_distributed.option_checks import check_byte_count
from deep500.lv3_distributed.progress_thread import ProgressThread, check_progress
from deep500.utils.errors import Deep500Error

_clock = time.perf_counter
#: Bucket size when none is given, here and in the simulator (PyTorch DDP's default
#: ``bucket_cap_mb`` is 25 MB; Horovod's fusion threshold 64 MB: for the small models
#: Deep500 trains here a smaller bucket gives more overlap).
DEFAULT_BUCKET_BYTES = 1 << 20


def check_bucket_bytes(value, where: str = "bucket_bytes") -> int:
    """``value`` if it is a positive integer number of bytes, else ``Deep500Error``."""
    return check_byte_count(value, where, f"{DEFAULT_BUCKET_BYTES}, 1 MiB")


class _Bucket:
    __slots__ = ("names", "buffer", "views", "request")

    def __init__(self, names: tuple, like: dict):
        self.names = names
        sizes = [like[n].size for n in names]
        self.buffer = np.empty(int(sum(sizes)), np.result_type(*[like[n] for n in names]))
        offsets = np.cumsum([0] + sizes).tolist()
        self.views = {n: self.buffer[offsets[i]:offsets[i + 1]].reshape(like[n].shape)
                      for i, n in enumerate(names)}
        self.request = None


class GradientBuckets(ExecutorEvent):
    """An executor event that buckets gradients as backprop completes them and starts
    one non-blocking allreduce-average per bucket (see the module docstring).

    Args:
        comm: the :class:`CommunicationNetwork`.
        like: ``{parameter: array}`` shaped like the gradients (their dtypes and shapes).
        bucket_bytes: a bucket starts its allreduce once it holds at least this many
            bytes (of the gradients' dtype).
        wire_options: further keywords of ``comm.iallreduce`` (``wire_dtype``).
        progress: ``"calls"`` (MPI progresses in the hooks' calls) or ``"thread"`` (a
            background thread also calls ``MPI_Test`` while buckets are in flight).
        exchange: ``exchange(comm, buffer) -> request`` starts a bucket's exchange
            and leaves its result in ``buffer`` when the request completes (default:
            the allreduce-average ``comm.iallreduce``; the neighbour and
            parameter-server schemes give their own).

    Use: :meth:`start_step` before the backward pass, then :meth:`finish` after it.
    Attributes: ``hook_seconds`` (cumulative seconds spent in the hooks), ``buckets``
    (how many buckets the latest step had), ``progress_thread`` (the
    :class:`ProgressThread` with ``progress="thread"``, else None). :meth:`close` ends
    the thread.
    """
    wants_operator_events = False
    wants_gradients = True

    def __init__(self, comm, like: dict, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 wire_options: dict | None = None, progress: str = "calls",
                 exchange=None):
        self.comm = comm
        self.exchange = exchange or self._allreduce_average
        self.like = {name: np.asarray(value) for name, value in like.items()}
        self.bucket_bytes = check_bucket_bytes(bucket_bytes)
        self.wire_options = dict(wire_options or {})
        self.active = False
        self.hook_seconds = 0.0
        self.buckets = 0
        self._cache: dict[tuple, _Bucket] = {}
        self._reset()
        self.progress_thread = (ProgressThread(self._progress_in_background)
                                if check_progress(progress) == "thread" else None)
        self._lock = (self.progress_thread.lock if self.progress_thread is not None
                      else contextlib.nullcontext())

    @property
    def started_buckets(self) -> int:
        """Buckets whose allreduce started in the current step."""
        return len(self._started)

    @property
    def buckets_in_flight(self) -> int:
        """Started buckets not yet seen complete by a progress call."""
        return len(self._started) - self._untested

    def close(self) -> None:
        """End the progress thread (if any)."""
        if self.progress_thread is not None:
            self.progress_thread.close()

    def _reset(self) -> None:
        self._pending: list[tuple[str, np.ndarray]] = []
        self._pending_bytes = 0
        self._started: list[_Bucket] = []
        self._untested = 0
        self._seen: set[str] = set()

    # -- the executor's side ------------------------------------------------------------
    def start_step(self) -> None:
        """Collect the next backward pass's gradients."""
        if self.active:
            raise Deep500Error("GradientBuckets: a step started before the previous one "
                               "finished; call finish() after each backward pass")
        self._reset()
        self.active = True

    def gradient_ready(self, name: str, gradient) -> None:
        """Parameter ``name``'s gradient is complete: add it to the open bucket and
        start that bucket's allreduce if it is full."""
        if not self.active or name not in self.like:
            return
        started = _clock()
        with self._lock:
            self._add(name, gradient)
        self.hook_seconds += _clock() - started

    def _add(self, name: str, gradient) -> None:
        if name in self._seen:
            raise Deep500Error(f"GradientBuckets: the executor reported the gradient of "
                               f"{name!r} twice in one backward pass")
        self._seen.add(name)
        self._pending.append((name, gradient))
        self._pending_bytes += self.like[name].nbytes
        if self._pending_bytes >= self.bucket_bytes:
            self._start_bucket()
        self._progress()

    def backward_progress(self) -> None:
        """After a node's backward: let MPI progress the outstanding allreduces."""
        if self.active and self._untested < len(self._started):
            started = _clock()
            with self._lock:
                self._progress()
            self.hook_seconds += _clock() - started

    # -- the scheme's side ----------------------------------------------------------------
    def finish(self, gradients: dict) -> dict:
        """After the backward pass: put the gradients not reported (``gradients`` holds
        every parameter's) into the last bucket, start it, wait for every bucket, and
        return ``{parameter: averaged gradient}`` (views into the bucket buffers)."""
        if not self.active:
            raise Deep500Error("GradientBuckets.finish() without start_step()")
        for name in self.like:
            if name not in self._seen:
                self._seen.add(name)
                self._pending.append((name, gradients[name]))
        if self._pending:
            self._start_bucket()
        averaged = {}
        with self._lock:
            if self.progress_thread is not None:
                self.progress_thread.pause()
            for bucket in self._started:
                bucket.request.wait()
                averaged.update(bucket.views)
            self.buckets = len(self._started)
            self.active = False
            self._reset()
        return averaged

    def _start_bucket(self) -> None:
        names = tuple(name for name, _ in self._pending)
        bucket = self._cache.get(names)
        if bucket is None:
            bucket = self._cache[names] = _Bucket(names, self.like)
        for name, gradient in self._pending:
            np.copyto(bucket.views[name], gradient, casting="same_kind")
        bucket.request = self.exchange(self.comm, bucket.buffer)
        self._started.append(bucket)
        self._pending, self._pending_bytes = [], 0
        if self.progress_thread is not None:
            self.progress_thread.resume()

    def _allreduce_average(self, comm, buffer):
        return comm.iallreduce(buffer, op="average", out=buffer, **self.wire_options)

    def _progress(self) -> None:
        # MPI_Test on the oldest outstanding request runs MPICH's progress engine.
        while self._untested < len(self._started):
            if not self._started[self._untested].request.test():
                return
            self._untested += 1

    def _progress_in_background(self) -> bool:
        """The progress thread's call (under the lock): test; True while a bucket is
        still in flight."""
        if not self.active:
            return False
        self._progress()
        return self._untested < len(self._started)
