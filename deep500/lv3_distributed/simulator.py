"""``d5.simulate_training``: the predicted time of one data-parallel training step on
``ranks`` ranks, layer by layer, from a per-layer step profile and a machine model.

The step is the one of ``d5ref.ConsistentDecentralized`` (synchronous data-parallel
SGD), priced as PyDTNN's simulator and Catalán's thesis (chapter 4) price it:

* **compute**: the forward pass over the nodes in graph order, then the backward pass
  in reverse order (``StepProfile`` per-node seconds at the batch per rank and thread
  count asked, scaled as ``step_profile`` says), plus the compute outside the nodes;
* **communication**, *blocking* (the scheme as Deep500 runs it): after the backward
  pass the gradients are packed into one fusion buffer and allreduced once:
  exposed = fusion copy + T_allreduce(n) + o (the copy also on one rank, where the
  scheme packs too; T and o are 0 there), where T_allreduce is the α-β-γ model of
  the algorithm (its object's ``cost`` in ``collectives``; Thakur, Rabenseifner &
  Gropp 2005) and o the per-call software overhead of the machine file (LogP's o; 0
  when it has none), times the machine file's in-context factor (``in_context``,
  default on): the slow-down ``deep500 calibrate`` measured for calls between compute bursts rather
  than back to back (cold caches, ranks arriving apart; 1.0 when the file has none);
* **communication**, *overlapped* (PyDTNN's non-blocking per-layer allreduce; Horovod's
  and PyTorch DDP's gradient buckets; ``overlap_timeline``): as the backward pass
  completes a layer's gradients they join a bucket; a bucket of at least
  ``bucket_bytes`` (and the last one) starts its allreduce as soon as both the bucket
  is full and the previous allreduce has finished (one collective in flight at a time,
  in order, as on one MPI communicator); the step waits for the last one before the
  update. The exposed communication is the time from the end of the backward pass to
  the end of the last allreduce. On cores that both compute and communicate, the two
  slow each other down: by the machine file's overlap stretches κ and η
  (``software.overlap``, measured by ``deep500 calibrate``), a backward node computes
  at 1/(1 + κ) of its speed while an allreduce is in flight and an allreduce runs at
  1/η of its speed beside the backward pass; a file without them leaves overlap free
  (a progress thread on an idle core, an offloading NIC);
* **communication dtype**: ``float16``/``bfloat16`` put 2 bytes per element on the
  wire instead of 4 (the α-β terms and γ priced on the wire bytes) and add the casts
  of the narrowed ring: every element is narrowed once (its first send, or by its
  chunk's owner) and widened (2p - 1)/p times (each chunk received in the
  reduce-scatter, then the whole result), at the seconds per element ``deep500
  calibrate`` measured for ``WireType.encode``/``decode`` (``software.wire_casts``);
  a file without them prices each cast as 6 bytes per element moved at the memory
  bandwidth, which on the 2-vCPU VM was a third of the measured cost for bfloat16;
* **wait for the slowest rank**: a synchronous step ends when the slowest rank's does.
  With ``step_samples`` in the profile, the typical (median) step of ``ranks`` ranks
  with independent noise is the median of the maximum of ``ranks`` draws: the
  quantile 0.5^(1/p) of one rank's step distribution (P(max ≤ x) = F(x)^p = 1/2;
  order statistics). Its excess over the median step is added (0 on one rank). The
  median is what ``benchmarks/lv3_simulator.py`` and the ``models`` experiment
  measure (the median over steps of the slowest rank's time), and unlike the mean
  it is not moved by a few outliers of a short profile. It stays bounded by the
  largest step measured, so at large scale it is a lower bound on the noise of a
  real machine;
* **update**: the update rule over all parameters, after the communication.

The result splits the step into these parts and gives the throughput (samples per
second over all ranks) and the weak-scaling parallel efficiency T(1 rank)/T(ranks) at
the same batch per rank. ``timeline`` holds the simulated events (lane, name, start,
end) for plots and traces.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from deep500.lv3_distributed.collectives.registry import allreduce_algorithm
from deep500.lv3_distributed.gradient_buckets import DEFAULT_BUCKET_BYTES
from deep500.lv3_distributed.overlap_timeline import overlapped_backward
from deep500.lv3_distributed.step_profile import StepProfile
from deep500.lv3_distributed.wire_dtype import check_comm_dtype, wire_type
from deep500.utils.errors import Deep500Error
from deep500.utils.machine import load_machine


@dataclass
class SimulatedStep:
    """One simulated training step (seconds) and what follows from it."""
    ranks: int
    batch_per_rank: int
    threads: int
    algorithm: str
    overlap: bool
    comm_dtype: str
    forward_s: float
    backward_s: float
    other_compute_s: float
    communication_s: float           # all communication, hidden or not
    exposed_communication_s: float   # the part the step waits for
    straggler_s: float               # the wait for the slowest rank
    update_s: float
    step_s: float
    throughput: float                # samples per second, all ranks
    parallel_efficiency: float       # T(1 rank) / T(ranks), same batch per rank
    gradient_bytes: int
    buckets: int
    timeline: list = field(default_factory=list, repr=False)
    profile_source: str = ""

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.other_compute_s

    def to_dict(self) -> dict:
        result = {k: v for k, v in self.__dict__.items() if k != "timeline"}
        result["compute_s"] = self.compute_s
        return result


def median_of_maximum(samples, ranks: int) -> float:
    """The median of the maximum of ``ranks`` i.i.d. draws from the distribution of
    ``samples``: its quantile 0.5^(1/ranks) (since P(max ≤ x) = F(x)^ranks), with
    NumPy's linear interpolation between order statistics."""
    x = np.asarray(samples, float)
    if x.size == 0:
        return 0.0
    return float(np.quantile(x, 0.5 ** (1.0 / int(ranks))))


def _check(ranks, comm_dtype, bucket_bytes):
    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise Deep500Error(f"simulate_training: ranks is {ranks!r}; give an integer >= 1")
    check_comm_dtype(comm_dtype, "simulate_training: comm_dtype")
    if not (isinstance(bucket_bytes, (int, float)) and bucket_bytes > 0):
        raise Deep500Error(f"simulate_training: bucket_bytes is {bucket_bytes!r}; give a "
                           f"positive number of bytes")


def cast_seconds_per_fp32_byte(machine, comm_dtype: str, ranks: int) -> float:
    """The casts of a narrowed allreduce per float32 byte of the buffer (module
    docstring): one narrowing and (2p - 1)/p widenings per element, at the machine
    file's measured seconds per element, else 6 bytes moved per cast at the memory
    bandwidth; 0.0 for float32."""
    if wire_type(comm_dtype) is None:
        return 0.0
    measured = machine.wire_cast_seconds(comm_dtype)
    if measured is None:
        return 2 * 6 / 4 / machine.memory_bandwidth
    encode, decode = measured
    p = int(ranks)
    return (encode + decode * (2 * p - 1) / p) / 4


class _Allreduces:
    """The price of allreducing a given number of float32 gradient bytes: one call of
    the algorithm (α-β-γ model plus the per-call overhead o, with the in-context factor
    when asked) on the bytes the wire carries, plus the casts to and from a narrower
    wire type (``cast_seconds_per_fp32_byte``)."""

    def __init__(self, algorithm, machine, ranks, comm_dtype, segment_bytes, in_context):
        self.algorithm, self.machine, self.ranks = algorithm, machine, ranks
        self.segment_bytes, self.in_context = segment_bytes, in_context
        wire = wire_type(comm_dtype)
        self.wire = (4 if wire is None else wire.itemsize) / 4.0
        self.cast_s_per_fp32_byte = cast_seconds_per_fp32_byte(machine, comm_dtype, ranks)

    def __call__(self, fp32_bytes) -> float:
        if self.ranks == 1 or fp32_bytes <= 0:
            return 0.0
        return (self.algorithm.call_cost(self.machine, fp32_bytes * self.wire, self.ranks,
                                         self.in_context, segment_bytes=self.segment_bytes)
                + self.cast_s_per_fp32_byte * fp32_bytes)


def _forward(step, timeline) -> float:
    """The compute outside the nodes, then the forward pass; returns its end."""
    t = step.other_compute_s
    timeline.append(("compute", "other compute", 0.0, t))
    for layer in step.layers:
        if layer.forward_s > 0:
            timeline.append(("compute", f"forward {layer.name}", t, t + layer.forward_s))
        t += layer.forward_s
    return t


def _backward_layer(layer, t, timeline) -> float:
    if layer.backward_s > 0:
        timeline.append(("compute", f"backward {layer.name}", t, t + layer.backward_s))
    return t + layer.backward_s


def _blocking(step, t, fusion, allreduce, timeline) -> tuple:
    """The backward pass, then one allreduce of all gradients after it. Returns
    (backward end, communication end, communication seconds, buckets)."""
    for layer in reversed(step.layers):
        t = _backward_layer(layer, t, timeline)
    total, communication, buckets = step.gradient_bytes, 0.0, 0
    if total > 0:
        communication = fusion + allreduce(total)
        timeline.append(("communication", f"allreduce {total} B", t, t + communication))
        buckets = 1
    return t, t + communication, communication, buckets


def _straggler_wait(step, ranks, straggler) -> float:
    """The typical wait for the slowest of ``ranks`` ranks (module docstring)."""
    if not (straggler and ranks > 1 and step.step_samples):
        return 0.0
    return max(0.0, median_of_maximum(step.step_samples, ranks)
               - float(np.median(step.step_samples)))


def simulate_training(profile: StepProfile, machine, ranks: int = 1, *,
                      threads: int | None = None, batch_per_rank: int | None = None,
                      algorithm: str = "ring", overlap: bool = False,
                      comm_dtype: str = "float32", bucket_bytes: float = DEFAULT_BUCKET_BYTES,
                      segment_bytes: float | None = None,
                      straggler: bool = True, in_context: bool = True,
                      busy_cores: bool = True) -> SimulatedStep:
    """Predict one synchronous data-parallel training step (see the module docstring).

    Args:
        profile: a ``StepProfile`` (``measure_step_profile``, ``modelled_step_profile``,
            or ``StepProfile.combine`` of measured ones).
        machine: a machine file's path, a dict or a ``MachineModel``.
        ranks: data-parallel ranks (1: no communication).
        threads, batch_per_rank: default the profile's; otherwise it is scaled.
        algorithm: allreduce algorithm (a name of ``collectives.allreduce_names()`` or
            an ``AllreduceAlgorithm``).
        overlap: per-bucket allreduces overlapped with the backward pass.
        comm_dtype: 'float32', 'float16' or 'bfloat16' on the wire.
        bucket_bytes: bucket size of the overlapped mode (fp32 gradient bytes).
        segment_bytes: segment size of ``segmented_ring``.
        straggler: add the expected wait for the slowest rank.
        in_context: price each allreduce with the machine file's in-context factor
            (calls between compute phases; see ``predict_allreduce_call``).
        busy_cores: overlapped, slow the compute and the allreduce beside each other
            by the machine file's overlap stretches (``software.overlap``; none when
            it has none for the algorithm).
    """
    if not isinstance(profile, StepProfile):
        raise Deep500Error(f"simulate_training: profile must be a StepProfile (from "
                           f"measure_step_profile or modelled_step_profile), not "
                           f"{type(profile).__name__}")
    _check(ranks, comm_dtype, bucket_bytes)
    chosen = allreduce_algorithm(algorithm, "simulate_training")
    machine = load_machine(machine)
    step = profile.at(batch_per_rank, threads, machine)
    p = int(ranks)
    allreduce = _Allreduces(chosen, machine, p, comm_dtype, segment_bytes, in_context)
    timeline = []
    t = _forward(step, timeline)
    # The scheme packs its gradients into the fusion buffer on one rank too.
    fusion = step.fusion_s if step.gradient_bytes > 0 else 0.0
    if not overlap or p == 1:
        backward_end, comm_end, communication, buckets = _blocking(
            step, t, fusion, allreduce, timeline)
    else:
        kappa, eta = ((busy_cores and machine.overlap_stretch(chosen.name)) or (0.0, 1.0))
        backward_end, comm_end, communication, buckets = overlapped_backward(
            step, t, fusion, allreduce, bucket_bytes, timeline, kappa, eta)
    wait = _straggler_wait(step, p, straggler)
    if wait > 0:
        timeline.append(("wait", "slowest rank", comm_end, comm_end + wait))
    update_start = comm_end + wait
    timeline.append(("compute", "update", update_start, update_start + step.update_s))
    step_s = update_start + step.update_s
    if p == 1:
        efficiency = 1.0
    else:
        alone = simulate_training(profile, machine, 1, threads=threads,
                                  batch_per_rank=batch_per_rank, algorithm=chosen,
                                  straggler=straggler, in_context=in_context)
        efficiency = alone.step_s / step_s if step_s > 0 else math.nan
    return SimulatedStep(
        ranks=p, batch_per_rank=step.batch, threads=step.threads, algorithm=chosen.name,
        overlap=bool(overlap), comm_dtype=comm_dtype, forward_s=step.forward_s,
        backward_s=step.backward_s, other_compute_s=step.other_compute_s,
        communication_s=communication, exposed_communication_s=comm_end - backward_end,
        straggler_s=wait, update_s=step.update_s, step_s=step_s,
        throughput=p * step.batch / step_s if step_s > 0 else math.nan,
        parallel_efficiency=efficiency, gradient_bytes=step.gradient_bytes,
        buckets=buckets, timeline=timeline, profile_source=step.source)
