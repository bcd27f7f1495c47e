"""The simulator's overlapped backward pass: bucketed allreduces beside backprop, on
cores that do both (``d5.simulate_training(..., overlap=True)``).

As the backward pass completes a layer's gradients they join a bucket; a bucket of at
least ``bucket_bytes`` (and the last one) is queued for its allreduce, which starts as
soon as the previous one has finished (one collective in flight at a time, in order,
as on one MPI communicator: PyDTNN's per-layer allreduce, Horovod's and PyTorch DDP's
gradient buckets).

Two rates couple the lanes (``deep500.lv3_distributed.calibration.overlap`` measures
them; the machine file's ``software.overlap``):

* while an allreduce is in flight, a backward node computes at 1 / (1 + κ) of its speed
  (κ: seconds of compute the communication's own CPU work takes per second in flight);
* while the backward pass computes, an allreduce progresses at 1 / η of its speed alone
  (η ≥ 1: it advances only when the cores give its progress calls a turn).

κ = 0 and η = 1 is the classic model, in which overlap is free (a progress thread on an
idle core, an offloading NIC). Once the backward pass ends, the queue drains at full
speed. A bucket's work is its allreduce alone (``allreduce(bytes)``) plus its share of
the fusion copy.
"""
from __future__ import annotations

from collections import deque


class _Lane:
    """The communication lane: the bucket in flight (remaining seconds of work at full
    speed) and the queue behind it."""

    def __init__(self, timeline: list):
        self.timeline = timeline
        self.queue: deque = deque()
        self.remaining = 0.0
        self.name = ""
        self.started = 0.0
        self.work = 0.0

    @property
    def busy(self) -> bool:
        return bool(self.name)

    def push(self, name: str, work: float, now: float) -> None:
        self.work += work
        self.queue.append((name, work))
        if not self.busy:
            self._next(now)

    def _next(self, now: float) -> None:
        self.name = ""
        if self.queue:
            self.name, self.remaining = self.queue.popleft()
            self.started = now

    def finish(self, now: float) -> None:
        self.timeline.append(("communication", self.name, self.started, now))
        self._next(now)

    def drain(self, now: float) -> float:
        """Run the rest at full speed; returns the time the last bucket ends."""
        while self.busy:
            now += self.remaining
            self.finish(now)
        return now


def _compute(lane: _Lane, start: float, seconds: float, kappa: float, eta: float) -> float:
    """A backward node of ``seconds`` beside the lane from ``start``; returns its end,
    having advanced the lane by as much as it progressed meanwhile."""
    t, left = start, seconds
    while left > 0:
        if not lane.busy:
            return t + left
        compute_end = left * (1.0 + kappa)
        communication_end = lane.remaining * eta
        if compute_end <= communication_end:
            lane.remaining -= compute_end / eta
            return t + compute_end
        t += communication_end
        left -= communication_end / (1.0 + kappa)
        lane.finish(t)
    return t


def overlapped_backward(step, t: float, fusion: float, allreduce, bucket_bytes: float,
                        timeline: list, kappa: float = 0.0, eta: float = 1.0) -> tuple:
    """The backward pass of ``step`` from ``t`` with its buckets' allreduces beside it
    (module docstring). Returns (backward end, communication end, communication
    seconds at full speed, buckets)."""
    total = step.gradient_bytes
    lane = _Lane(timeline)
    bucket, buckets = 0, 0
    last_with_gradients = next((i for i, layer in enumerate(step.layers)
                                if layer.gradient_bytes), None)
    for i in range(len(step.layers) - 1, -1, -1):
        layer = step.layers[i]
        end = _compute(lane, t, layer.backward_s, kappa, eta)
        if layer.backward_s > 0:
            timeline.append(("compute", f"backward {layer.name}", t, end))
        t = end
        bucket += layer.gradient_bytes
        if bucket and (bucket >= bucket_bytes or i == last_with_gradients):
            buckets += 1
            lane.push(f"allreduce bucket {buckets} ({bucket} B)",
                      fusion * bucket / total + allreduce(bucket), t)
            bucket = 0
    return t, lane.drain(t), lane.work, buckets
