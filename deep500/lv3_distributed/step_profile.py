"""What one data-parallel training step is made of, per layer: the input of the
training-step simulator (``deep500.lv3_distributed.simulator``).

A :class:`StepProfile` holds, for one model at one batch size per rank and one thread
count:

* per ONNX node, in graph order, its forward and backward seconds and the bytes of the
  gradients it completes (the parameters it reads; a parameter read by several nodes
  is complete when the backward pass reaches the first of them in graph order);
* ``other_compute_s``: the compute phase outside the nodes (new input, prepare
  parameters, the executor's bookkeeping between nodes, collecting the gradients);
* ``update_s``: the update rule over all parameters (step 3 of the three-step
  optimizer, Ben-Nun et al., IPDPS 2019, IV-D);
* ``fusion_s``: packing the gradients into the fusion buffer (Horovod's tensor fusion,
  ``FusedBuffer.pack``);
* ``step_samples``: the seconds of whole steps measured, whose spread prices the wait
  for the slowest rank (``simulator``).

It comes either from measurement (:func:`measure_step_profile`: OperatorTimes for the
per-node split, whole steps of the optimizer timed without events for the rest), or
from a per-layer model (:func:`modelled_step_profile`: the roofline of
``cost_model`` or a trained ``LearnedLayerModel``), so the simulator runs for a model
that was never executed here.

Scaling (how a profile measured at one batch size or thread count is used at
another, as PyDTNN's simulator scales its per-layer measurements):

* batch: with profiles at two or more batch sizes (:meth:`StepProfile.combine`),
  each node's time is the least-squares line a + c·b through them (a, c ≥ 0);
  with one, a node's time above the profile's smallest node time of its direction
  (the per-node dispatch floor) grows in proportion to the batch;
* threads: the batch-proportional part of a Conv/Gemm/MatMul node scales by
  peak(profile threads) / peak(threads) of the machine model; other nodes are taken
  as memory- or overhead-bound and do not change.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from deep500.utils.errors import Deep500Error

_COMPUTE_BOUND = {"Conv", "Gemm", "MatMul", "ConvTranspose"}


@dataclass(frozen=True)
class LayerTime:
    """One node of the step: its forward and backward seconds and the gradient bytes
    (fp32 on this rank) that are complete once its backward pass has run."""
    name: str
    op_type: str
    forward_s: float
    backward_s: float
    gradient_bytes: int = 0
    parameters: tuple = ()


@dataclass
class StepProfile:
    """A training step, per layer (see the module docstring). ``source`` says where the
    times come from ("measured (reference executor)", "analytic (roofline)", ...)."""
    model: str
    batch: int
    threads: int
    layers: list
    other_compute_s: float = 0.0
    update_s: float = 0.0
    fusion_s: float = 0.0
    step_samples: list = field(default_factory=list)
    source: str = "measured"
    executor: str = ""
    # per-node linear batch model (name -> (direction -> (a, c))), set by ``combine``
    batch_lines: dict = field(default_factory=dict, repr=False)

    @property
    def gradient_bytes(self) -> int:
        return int(sum(layer.gradient_bytes for layer in self.layers))

    @property
    def forward_s(self) -> float:
        return float(sum(layer.forward_s for layer in self.layers))

    @property
    def backward_s(self) -> float:
        return float(sum(layer.backward_s for layer in self.layers))

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.other_compute_s

    def to_dict(self) -> dict:
        """JSON-ready: every field, layers as dicts (``from_dict`` reads it back)."""
        data = {k: v for k, v in self.__dict__.items() if k not in ("layers", "batch_lines")}
        data["layers"] = [dict(layer.__dict__, parameters=list(layer.parameters))
                          for layer in self.layers]
        data["batch_lines"] = {name: {d: list(line) for d, line in lines.items()}
                               for name, lines in self.batch_lines.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "StepProfile":
        try:
            layers = [LayerTime(**dict(layer, parameters=tuple(layer.get("parameters", ()))))
                      for layer in data["layers"]]
            lines = {name: {d: tuple(line) for d, line in value.items()}
                     for name, value in (data.get("batch_lines") or {}).items()}
            fields = {k: v for k, v in data.items() if k not in ("layers", "batch_lines")}
            return cls(layers=layers, batch_lines=lines, **fields)
        except (KeyError, TypeError) as error:
            raise Deep500Error(f"not a step profile ({type(error).__name__}: {error}); "
                               f"write one with StepProfile.to_dict") from None

    @staticmethod
    def combine(profiles) -> "StepProfile":
        """One profile that knows each node's time as a line in the batch size, from
        measured profiles of the same model at two or more batch sizes."""
        profiles = sorted(profiles, key=lambda p: p.batch)
        if len({p.batch for p in profiles}) < 2:
            raise Deep500Error("StepProfile.combine needs profiles at two or more different "
                               "batch sizes")
        names = [layer.name for layer in profiles[0].layers]
        for p in profiles[1:]:
            if [layer.name for layer in p.layers] != names:
                raise Deep500Error(f"StepProfile.combine: the profiles at batch {p.batch} and "
                                   f"{profiles[0].batch} are of different models")
        batches = np.array([p.batch for p in profiles], float)
        lines = {}
        for i, name in enumerate(names):
            lines[name] = {d: _fit_line(batches, [getattr(p.layers[i], d) for p in profiles])
                           for d in ("forward_s", "backward_s")}
        base = profiles[-1]
        return replace(base, batch_lines=lines,
                       step_samples=list(base.step_samples),
                       source=base.source + f", batch lines from {sorted(set(batches.astype(int)))}")

    def at(self, batch: int | None = None, threads: int | None = None,
           machine=None) -> "StepProfile":
        """This profile at another batch size per rank and thread count (see the module
        docstring for the rules); ``machine`` gives the peaks for a thread change."""
        batch = self.batch if batch is None else int(batch)
        threads = self.threads if threads is None else int(threads)
        if batch < 1 or threads < 1:
            raise Deep500Error(f"batch ({batch}) and threads ({threads}) must be >= 1")
        if batch == self.batch and threads == self.threads:
            return self
        thread_factor = 1.0
        if threads != self.threads:
            if machine is None:
                raise Deep500Error(f"the profile was measured at {self.threads} thread(s); "
                                   f"give a machine model to scale it to {threads}")
            thread_factor = machine.peak_flops(self.threads) / machine.peak_flops(threads)
        floors = {d: min((getattr(layer, d) for layer in self.layers
                          if getattr(layer, d) > 0), default=0.0)
                  for d in ("forward_s", "backward_s")}
        layers = []
        for layer in self.layers:
            values = {}
            for d in ("forward_s", "backward_s"):
                t = getattr(layer, d)
                if t <= 0:
                    values[d] = 0.0
                    continue
                if layer.name in self.batch_lines:
                    a, c = self.batch_lines[layer.name][d]
                    fixed, variable = a, c * batch
                else:
                    fixed = min(floors[d], t)
                    variable = (t - fixed) * batch / self.batch
                if layer.op_type in _COMPUTE_BOUND:
                    variable *= thread_factor
                values[d] = fixed + variable
            layers.append(replace(layer, **values))
        scale = (sum(v.forward_s + v.backward_s for v in layers)
                 / max(self.forward_s + self.backward_s, 1e-30))
        return replace(self, batch=batch, threads=threads, layers=layers,
                       step_samples=[s * scale for s in self.step_samples],
                       source=self.source + f", scaled from batch {self.batch} x "
                                            f"{self.threads} thread(s)")


def _fit_line(x, y):
    """Least-squares y = a + c·x with a, c >= 0."""
    y = np.asarray(y, float)
    c, a = np.polyfit(x, y, 1)
    if c < 0:
        return float(np.mean(y)), 0.0
    if a < 0:
        return 0.0, float(np.dot(x, y) / np.dot(x, x))
    return float(a), float(c)


# --- which node completes which gradient ---------------------------------------------

def node_names(proto) -> list[str]:
    """The node names OperatorTimes and ``cost_model`` use (``op_type_i`` when unnamed)."""
    return [node.name or f"{node.op_type}_{i}" for i, node in enumerate(proto.graph.node)]


def gradient_owners(proto, parameters) -> dict:
    """{node name: [(parameter, bytes)]}: each trainable parameter at the first node in
    graph order that reads it (its gradient is complete after that node's backward)."""
    sizes = {}
    for init in proto.graph.initializer:
        if init.name in parameters:
            sizes[init.name] = int(np.prod(init.dims, dtype=np.int64)) * 4
    owners, seen = {}, set()
    for name, node in zip(node_names(proto), proto.graph.node):
        for value in node.input:
            if value in sizes and value not in seen:
                seen.add(value)
                owners.setdefault(name, []).append((value, sizes[value]))
    return owners


def _proto_and_parameters(model):
    """(ModelProto, trainable parameter names) of an OnnxModel, ModelProto or path."""
    import onnx
    from deep500.utils.onnx_interop.parser import load_and_parse_model
    parsed = model if hasattr(model, "parameters") and hasattr(model, "operations") \
        else load_and_parse_model(model)
    proto = parsed.proto if parsed.proto is not None else model
    if not isinstance(proto, onnx.ModelProto):
        raise Deep500Error("the step profile needs the model's ONNX graph (a ModelProto, a "
                           "path, or an OnnxModel parsed from one)")
    return proto, set(parsed.parameters), parsed.name


def with_static_batch(proto, batch: int):
    """A copy of ``proto`` whose graph inputs (not initializers) have ``batch`` as their
    first dimension where it is symbolic, so shape inference gives every node static
    shapes (``cost_model.network_costs`` needs them)."""
    import onnx
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    initializers = {init.name for init in copy.graph.initializer}
    for value in copy.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            dims[0].Clear()
            dims[0].dim_value = int(batch)
    for value in copy.graph.output:
        dims = value.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            dims[0].Clear()
            dims[0].dim_value = int(batch)
    del copy.graph.value_info[:]
    return copy


# --- measured ------------------------------------------------------------------------

def measure_step_profile(model, executor, optimizer, inputs: dict, loss: str = "loss",
                         reruns: int = 20, warmup: int = 3, batch: int | None = None,
                         threads: int = 1, name: str | None = None,
                         executor_name: str = "executor", step=None,
                         sync=None, rounds: int = 3) -> StepProfile:
    """Measure a step of ``optimizer`` (a ThreeStepOptimizer on ``executor``) on the
    minibatch ``inputs`` (a dict; or a list of minibatches, taken in turn, so that the
    steps see changing data as in training).

    ``warmup`` steps, then steps timed without events (the compute phase, the packing
    of the gradients into a fusion buffer, the update), then per-node forward and
    backward times of runs with ``OperatorTimes`` (``layer_profile.measure_profile``).
    ``other_compute_s`` = compute phase − Σ node times (at least 0). The optimizer's
    parameters change (it trains).

    ``step``: a callable running one whole training step on a minibatch as training
    will run it (a distributed scheme's ``step`` over a one-rank communicator, so
    nothing is communicated). Its time minus that of the three parts above is the
    step's software overhead around them (the scheme's events, bookkeeping and
    telemetry, the loss fetched), added to ``other_compute_s``, and its times are the
    ``step_samples``.

    ``rounds``: the ``reruns`` of each of these measurements are split into this many
    rounds, taken in turn (three parts, whole steps, per node; again), and every
    figure is the median over rounds of its round's median (the overhead: of the
    round's whole-step median minus its three parts'). A disturbance of tens of
    milliseconds (a stalled vCPU, a burst of other work) then moves one round, not
    the profile: measured back to back, the three parts of an MLP step on this host
    were now and then 1.7x slow while the whole steps and nodes timed right after were
    not, and the profile predicted 1.6x the step that training then took.

    ``sync``: a callable run before every timed step and whole step, outside the clock
    (e.g. ``comm.Barrier`` of ranks profiling at once): ranks of synchronous training
    start every step together, so their phases coincide and they contend for the
    shared cache, memory and (on SMT siblings) core at the same moments, which ranks
    profiling out of step do not.
    """
    from deep500.lv1_network.layer_profile import measure_profile, merge_profiles
    proto, parameters, model_name = _proto_and_parameters(model)
    minibatches = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if not minibatches:
        raise Deep500Error("measure_step_profile: no minibatch given")
    if int(rounds) < 1:
        raise Deep500Error(f"measure_step_profile: rounds must be at least 1, not {rounds}")
    inputs = minibatches[0]
    batch = int(batch or _batch_of(inputs))
    proto = with_static_batch(proto, batch)
    parts = _ThreeParts(optimizer, minibatches, sync)
    parts.run(warmup, timed=False)

    def node_round(count, first):
        return measure_profile(proto, executor, inputs, loss=loss, reruns=count,
                               warmup=1 if first else 0, name=name or model_name,
                               executor_name=executor_name, batch=batch)
    round_parts, overheads, wrapped, node_rounds = _measure_rounds(
        _round_sizes(reruns, rounds), parts, step, minibatches, sync, node_round)
    layers = _layers(proto, parameters, merge_profiles(node_rounds, "median"))

    def figure(key):   # the median over rounds of the rounds' medians
        return float(np.median([np.median(r[key]) for r in round_parts]))
    loop_overhead = max(0.0, float(np.median(overheads))) if overheads else 0.0
    node_sum = sum(layer.forward_s + layer.backward_s for layer in layers)
    samples = wrapped or [s for r in round_parts for s in r["whole"]]
    return StepProfile(
        model=name or model_name, batch=batch, threads=int(threads),
        layers=layers,
        other_compute_s=max(0.0, figure("compute") - node_sum) + loop_overhead,
        update_s=figure("update"), fusion_s=figure("fusion"),
        step_samples=[float(s) for s in samples], source=f"measured ({executor_name})",
        executor=executor_name)


def _round_sizes(reruns: int, rounds: int) -> list[int]:
    """The ``reruns`` split into ``rounds`` rounds (at most one per rerun)."""
    rounds = min(int(rounds), max(1, int(reruns)))
    return [len(part) for part in np.array_split(np.arange(max(1, int(reruns))), rounds)]


def _measure_rounds(per_round, parts, step, minibatches, sync, node_round) -> tuple:
    """The rounds of ``measure_step_profile``, in turn: the three parts, the whole
    steps (with ``step``) and the per-node runs (``node_round(count, first)``). Returns
    (the parts' rounds, each round's whole-step overhead, the whole steps' times, the
    node profiles' rounds)."""
    round_parts, overheads, wrapped, node_rounds = [], [], [], []
    for count in per_round:
        round_parts.append(parts.run(count))
        if step is not None:
            if not wrapped:
                _time_whole_steps(step, minibatches, 0, 2, sync)   # warm-up, untimed
            whole = _time_whole_steps(step, minibatches, 2 + len(wrapped), count, sync)
            overheads.append(float(np.median(whole))
                             - float(np.median(round_parts[-1]["whole"])))
            wrapped.extend(whole)
        node_rounds.append(node_round(count, not node_rounds))
    return round_parts, overheads, wrapped, node_rounds


def _layers(proto, parameters, nodes) -> list:
    """A ``LayerTime`` per node in graph order: its measured times and the gradients
    complete after its backward."""
    owners = gradient_owners(proto, parameters)
    layers = []
    for node_name, node in zip(node_names(proto), proto.graph.node):
        owned = owners.get(node_name, [])
        layers.append(LayerTime(node_name, node.op_type, nodes.forward.get(node_name, 0.0),
                                nodes.backward.get(node_name, 0.0),
                                sum(b for _, b in owned), tuple(p for p, _ in owned)))
    return layers


class _ThreeParts:
    """The three parts of a step timed apart: compute the gradients, pack them into a
    fusion buffer (Horovod's tensor fusion), apply the update rule; minibatches in
    turn across calls of :meth:`run`."""

    def __init__(self, optimizer, minibatches, sync):
        self.optimizer, self.minibatches, self.sync = optimizer, minibatches, sync
        self.fused, self.taken = None, 0

    def run(self, steps: int, timed: bool = True) -> dict:
        from deep500.lv3_distributed.distributed_optimizer import FusedBuffer
        clock = time.perf_counter
        times = {"compute": [], "fusion": [], "update": [], "whole": []}
        for _ in range(int(steps)):
            minibatch = self.minibatches[self.taken % len(self.minibatches)]
            self.taken += 1
            if self.sync is not None:
                self.sync()
            t0 = clock()
            _, gradients = self.optimizer.compute_gradients(minibatch)
            t1 = clock()
            if self.fused is None:
                self.fused = FusedBuffer(gradients)
            self.fused.pack(gradients)
            t2 = clock()
            self.optimizer.apply_gradients(self.fused.unpack())
            t3 = clock()
            if timed:
                times["compute"].append(t1 - t0)
                times["fusion"].append(t2 - t1)
                times["update"].append(t3 - t2)
                times["whole"].append(t3 - t0)
        return times


def _time_whole_steps(step, minibatches, start: int, steps: int, sync) -> list[float]:
    """Seconds of ``steps`` calls of ``step`` (a whole training step), each after
    ``sync``, on the minibatches in turn from the ``start``-th (rounds continue where
    the last one stopped)."""
    clock, times = time.perf_counter, []
    for i in range(start, start + int(steps)):
        if sync is not None:
            sync()
        t0 = clock()
        step(minibatches[i % len(minibatches)])
        times.append(clock() - t0)
    return times


def _batch_of(inputs: dict) -> int:
    for value in inputs.values():
        shape = np.shape(value)
        if shape:
            return int(shape[0])
    return 1


# --- modelled ------------------------------------------------------------------------

def modelled_step_profile(model, machine, batch: int | None = None, threads: int = 1,
                          layer_model=None, overhead: dict | None = None,
                          name: str | None = None) -> StepProfile:
    """A step profile without running anything: each node's time from the roofline of
    ``cost_model`` on ``machine`` (plus ``overhead[direction]`` seconds per node) or,
    with ``layer_model`` (a fitted ``LearnedLayerModel``), its prediction; the update
    as a memory-bound pass over parameters and gradients (SGD reads w and g and writes
    w: 12 bytes per parameter); the fusion copy from the machine file's measured
    ``fusion_copy`` (per tensor + per byte), else 8 bytes per parameter.

    The model's batch axis must be static (it is the batch per rank); ``batch`` only
    labels the profile. A node whose operator has no cost rule raises a Deep500Error
    that names it: measure the model instead (``measure_step_profile``).
    """
    from deep500.lv0_operators.cost_model import network_costs, roofline_time
    from deep500.utils.machine import load_machine
    machine = load_machine(machine)
    proto, parameters, model_name = _proto_and_parameters(model)
    if batch is not None:
        proto = with_static_batch(proto, batch)
    try:
        costs = network_costs(proto)
    except Deep500Error as error:
        raise Deep500Error(f"the step of model '{name or model_name}' cannot be modelled: "
                           f"{error}") from None
    overhead = overhead or {}
    if layer_model is not None:
        from deep500.lv1_network.layer_profile import LayerProfile
        shell = LayerProfile(name or model_name, "model", int(batch or 0),
                             [c.node for c in costs], {c.node: c for c in costs},
                             {c.node: 1.0 for c in costs}, {c.node: 1.0 for c in costs})
        predicted = layer_model.predict(shell)
        times = {c.node: (predicted["forward"][c.node], predicted["backward"][c.node])
                 for c in costs}
        source = "learned layer model"
    else:
        times = {c.node: tuple(roofline_time(c, machine, threads, d, overhead.get(d, 0.0))
                               if c.forward_flops or c.forward_bytes else 0.0
                               for d in ("forward", "backward")) for c in costs}
        source = "analytic (roofline)"
    owners = gradient_owners(proto, parameters)
    layers = []
    for cost in costs:
        owned = owners.get(cost.node, [])
        forward, backward = times[cost.node]
        layers.append(LayerTime(cost.node, cost.op_type, float(forward), float(backward),
                                sum(b for _, b in owned), tuple(p for p, _ in owned)))
    nbytes = sum(layer.gradient_bytes for layer in layers)
    tensors = sum(len(layer.parameters) for layer in layers)
    fusion = machine.fusion_copy_time(nbytes, max(tensors, 1))
    if fusion <= 0:  # the machine file has no measured fusion copy: read + write
        fusion = 2 * nbytes / machine.memory_bandwidth
    batch_value = batch
    if batch_value is None:
        first = costs[0].input_shape if costs else ()
        batch_value = first[0] if first else 1
    return StepProfile(model=name or model_name, batch=int(batch_value), threads=int(threads),
                       layers=layers, update_s=3 * nbytes / machine.memory_bandwidth,
                       fusion_s=fusion, source=source,
                       executor="model")
