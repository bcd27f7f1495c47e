"""``d5.PipelineParallel``: pipeline (model) parallelism over MPI ranks, optionally data
parallel over groups of pipelines.

The ONNX graph is cut into ``S`` contiguous stages
(:mod:`~deep500.lv3_distributed.pipeline.stage_split`), by default where the measured
forward + backward seconds of the nodes are balanced (the linear partition minimising
the slowest stage), or at an explicit cut list. Rank ``g·S + s`` of a world of
``S·D`` ranks runs stage ``s`` of pipeline ``g`` (``data_parallel=D``). Each step takes a
minibatch (the same on every rank of a pipeline; each pipeline its own shard), splits
it into ``M`` microbatches and runs the schedule (``"gpipe"`` or ``"1f1b"``,
:mod:`~deep500.lv3_distributed.pipeline.schedule`): activations go forward and their
gradients backward by MPI point-to-point messages of exactly the tensors' bytes
(:mod:`~deep500.lv3_distributed.pipeline.transfer`). After the last backward each stage
sums its parameters' gradients over the microbatches (each microbatch's loss weighted
by its share of the minibatch, so that the sum is the gradient of the minibatch's mean
loss, as one process computes it), averages them over the ``D`` replicas of the stage
(allreduce) and applies the wrapped optimizer's update rule.

The backward of a microbatch runs the stage's forward again (GPipe's
re-materialisation, Huang et al., NeurIPS 2019, §2.3): a Level-1 executor
backpropagates only together with its forward pass. Training is then the same as one
process's (same parameters within float rounding) for graphs whose nodes act on each
sample alone (no batch statistics: BatchNormalization in training mode would see
microbatches) and whose loss is a mean over the minibatch.

Measured per step and per stage (``step_records``): forward and backward seconds (the
stage's busy time: each operation of the schedule from its start to its end, less the
time its receive waited), seconds waiting for messages (receives, and completing the
sends at the end), the makespan from the start of the
step (a barrier of the pipeline's ranks over the raw communicator, not counted as the
scheme's traffic) to the end of the last backward, the allreduce and the update.
:meth:`PipelineParallel.bubble` gives the bubble fraction measured
(``1 − Σ_s busy_s / (S · T)`` with ``T`` the slowest stage's makespan, median over
steps), GPipe's formula ``(S − 1)/(M + S − 1)``, and the timeline model's prediction
from the measured stage times (:mod:`~deep500.lv3_distributed.pipeline.step_model`).
"""
from __future__ import annotations

import time

import numpy as np

from deep500.lv1_network.network import gradient_name
from deep500.lv2_training.optimizer import ThreeStepOptimizer
from deep500.lv3_distributed.communication import CommunicationNetwork
from deep500.lv3_distributed.distributed_optimizer import FusedBuffer
from deep500.lv3_distributed.pipeline.node_times import measure_node_seconds
from deep500.lv3_distributed.pipeline.schedule import FORWARD, in_flight, schedule_named
from deep500.lv3_distributed.pipeline.stage_split import UPSTREAM, GraphCuts, balanced_cuts
from deep500.lv3_distributed.pipeline.step_model import (gpipe_bubble,
                                                         predict_pipeline_step)
from deep500.lv3_distributed.pipeline.transfer import StageLinks
from deep500.utils.errors import Deep500Error

_clock = time.perf_counter


def microbatch_bounds(batch: int, microbatches: int) -> list:
    """``[(start, end)]`` of ``microbatches`` near-equal parts of ``batch`` samples."""
    if batch < microbatches:
        raise Deep500Error(f"Pipeline: a minibatch of {batch} samples cannot be split into "
                           f"{microbatches} microbatches; use a larger batch or fewer "
                           f"microbatches")
    edges = np.linspace(0, batch, microbatches + 1).round().astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


def _positive(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise Deep500Error(f"PipelineParallel: {name}={value!r}; give a whole number >= 1")
    return int(value)


class PipelineParallel:
    """Pipeline-parallel training of ``model`` (an ``onnx.ModelProto`` or a path) on
    ``stages · data_parallel`` MPI ranks (see the module docstring).

    Args:
        stages, microbatches: S and M.
        schedule: ``"gpipe"`` or ``"1f1b"``.
        executor: ``executor(onnx_model) -> GraphExecutor``, e.g. ``d5ref.from_onnx``.
        optimizer: ``optimizer(executor) -> ThreeStepOptimizer``, e.g.
            ``lambda e: d5ref.GradientDescent(e, learning_rate=0.1)``.
        cuts: S − 1 node indices where stages start; default: balanced by
            ``node_seconds`` (one per node, graph order) or, without them, by seconds
            measured on world rank 0 with ``profile_inputs`` (a minibatch) and shared.
        data_parallel: D pipelines, each on its shard of the data.
        comm: an mpi4py communicator (default: the world) of exactly S·D ranks.
        loss: the model's scalar loss output (a mean over the minibatch).

    Attributes: ``stage`` (this rank's :class:`Stage`), ``stage_index``, ``group``,
    ``executor``, ``base`` (the wrapped optimizer), ``comm`` (the pipeline's
    CommunicationNetwork), ``data_comm`` (the stage's replicas', or None), ``cuts``,
    ``step_records``.
    """

    def __init__(self, model, stages: int, microbatches: int, schedule: str = "gpipe", *,
                 executor, optimizer, cuts=None, node_seconds=None, profile_inputs=None,
                 data_parallel: int = 1, comm=None, loss: str = "loss"):
        from mpi4py import MPI
        self.stages = _positive(stages, "stages")
        self.microbatches = _positive(microbatches, "microbatches")
        self.data_parallel = _positive(data_parallel, "data_parallel")
        self.schedule_name = schedule
        schedule_function = schedule_named(schedule)
        world = MPI.COMM_WORLD if comm is None else getattr(comm, "comm", comm)
        if world.Get_size() != self.stages * self.data_parallel:
            raise Deep500Error(
                f"PipelineParallel: {self.stages} stages x data_parallel="
                f"{self.data_parallel} need {self.stages * self.data_parallel} ranks; the "
                f"communicator has {world.Get_size()}. Launch with mpirun -np "
                f"{self.stages * self.data_parallel}")
        self.world = world
        rank = world.Get_rank()
        self.group, self.stage_index = divmod(rank, self.stages)
        self.comm = CommunicationNetwork(world.Split(self.group, self.stage_index))
        # This stage's replicas, one per pipeline (rank g is pipeline g): their
        # allreduce, and the data shard of a DistributedSampler over them.
        self.replicas = CommunicationNetwork(world.Split(self.stage_index, self.group))
        self.data_comm = self.replicas if self.data_parallel > 1 else None
        graph = GraphCuts(model, loss)
        self.graph_loss = loss
        if cuts is None:
            cuts = self._balanced_cuts(graph, executor, node_seconds, profile_inputs)
        self.cuts = list(graph.check_cuts(cuts))
        if len(self.cuts) != self.stages - 1:
            raise Deep500Error(f"PipelineParallel: {self.stages} stages need "
                               f"{self.stages - 1} cuts, got {self.cuts}")
        self.all_stages = graph.stages(self.cuts)
        self.stage = self.all_stages[self.stage_index]
        self.executor = executor(self.stage.model)
        self.base = optimizer(self.executor)
        if not isinstance(self.base, ThreeStepOptimizer):
            raise Deep500Error(f"PipelineParallel wraps a three-step or update-rule "
                               f"optimizer (e.g. d5ref.GradientDescent); the optimizer "
                               f"factory returned {type(self.base).__name__}")
        self.order = schedule_function(self.stage_index, self.stages, self.microbatches)
        self.links = StageLinks(self.comm, self.stage_index, self.stages)
        self.last = self.stage_index == self.stages - 1
        self.step_records: list[dict] = []
        self.last_batch = None
        self._fused = None

    # -- set-up ----------------------------------------------------------------------
    def _balanced_cuts(self, graph, executor, node_seconds, profile_inputs) -> list:
        names = [node.name for node in graph.nodes]
        if node_seconds is None:
            if profile_inputs is None:
                raise Deep500Error("PipelineParallel: give cuts=, node_seconds= or "
                                   "profile_inputs= (a minibatch to time the nodes on)")
            node_seconds = None
            if self.world.Get_rank() == 0:
                node_seconds = measure_node_seconds(executor(graph.model), names,
                                                    profile_inputs, graph.loss)
            node_seconds = self.world.bcast(node_seconds, root=0)   # bookkeeping
        if len(node_seconds) != len(names):
            raise Deep500Error(f"PipelineParallel: node_seconds has {len(node_seconds)} "
                               f"values; the model has {len(names)} nodes")
        self.node_seconds = list(node_seconds)
        return balanced_cuts(node_seconds, self.stages, graph.valid_positions())

    @property
    def loss(self) -> str:
        return self.stage.loss

    @property
    def max_in_flight(self) -> int:
        """Microbatches this stage keeps activations of at once under its schedule."""
        return in_flight(self.order)

    # -- a step ------------------------------------------------------------------------
    def step(self, inputs: dict) -> dict:
        """One training step on minibatch ``inputs`` (``{graph input: array}``, the
        same on every rank of this pipeline). Returns, on the last stage, the
        minibatch's loss and the model's other outputs (concatenated over
        microbatches); ``{}`` on other stages."""
        stage, executor, base = self.stage, self.executor, self.base
        batch = self.last_batch = self._batch_size(inputs)
        bounds = microbatch_bounds(batch, self.microbatches)
        self.comm.comm.Barrier()       # a common start for the measured makespan
        start = _clock()
        record = {"forward": 0.0, "backward": 0.0, "wait": 0.0}
        base.new_input()
        for name in stage.parameters:
            base.prepare_param(name)
        gradients = {}
        received, outputs = {}, {}
        for kind, m in self.order:
            began = _clock()
            low, high = bounds[m]
            feeds = {name: inputs[name][low:high] for name in stage.feeds}
            if kind == FORWARD:
                received[m] = self.links.receive_activations(stage.receives, high - low)
                waited = _clock() - began
                self._feed_received(received[m])
                feeds.update({t.name + UPSTREAM: np.zeros(t.shape_for(high - low), t.dtype)
                              for t in stage.sends})
                result = executor.inference(feeds)
                if self.last:
                    outputs[m] = {k: np.array(v) for k, v in result.items()}
                else:
                    self.links.send_activations(stage.sends, result)
                record["forward"] += _clock() - began - waited
                record["wait"] += waited
                continue
            upstream = self.links.receive_gradients(stage.sends, high - low)
            waited = _clock() - began
            self._feed_received(received.pop(m))
            feeds.update({name + UPSTREAM: value for name, value in upstream.items()})
            result = executor.inference_and_backprop(feeds, stage.loss)
            # The last stage's loss is the microbatch's mean: weighted by its share of
            # the minibatch, the gradients sum to those of the minibatch's mean loss.
            weight = (high - low) / batch if self.last else 1.0
            for name in stage.parameters:
                g = result[gradient_name(name)] * weight
                if name in gradients:
                    gradients[name] += g
                else:
                    gradients[name] = g
            self.links.send_gradients(stage.receives, {
                t.name: result[gradient_name(t.name)] * weight for t in stage.receives})
            record["backward"] += _clock() - began - waited
            record["wait"] += waited
        waited = _clock()
        self.links.wait()
        record["wait"] += _clock() - waited
        record["makespan"] = _clock() - start
        began = _clock()
        if self.data_comm is not None and gradients:
            self._average_over_replicas(gradients)
        record["allreduce"] = _clock() - began
        began = _clock()
        base._modify_gradients(gradients)
        base.apply_gradients(gradients)
        base.step_count += 1
        record["update"] = _clock() - began
        self.step_records.append(record)
        if not self.last:
            return {}
        return self._minibatch_outputs(outputs, bounds, batch)

    def _batch_size(self, inputs: dict) -> int:
        sizes = {name: len(inputs[name]) for name in self.stage.feeds}
        if not sizes:
            sizes = {name: len(value) for name, value in inputs.items()}
        if len(set(sizes.values())) != 1:
            raise Deep500Error(f"PipelineParallel: the minibatch's inputs have different "
                               f"batch sizes {sizes}")
        return next(iter(sizes.values()))

    def _feed_received(self, arrays: dict) -> None:
        network = self.executor.network
        for name, value in arrays.items():
            network.feed_tensor(name, value, is_param=True)

    def _average_over_replicas(self, gradients: dict) -> None:
        if self._fused is None:
            self._fused = FusedBuffer({n: gradients[n] for n in self.stage.parameters})
        buffer = self._fused.pack(gradients)
        self.data_comm.allreduce(buffer, op="average", out=buffer)
        for name, view in self._fused.unpack().items():
            gradients[name] = view.copy()

    def _minibatch_outputs(self, outputs: dict, bounds, batch: int) -> dict:
        first = outputs[0]
        merged = {}
        for name, value in first.items():
            if name == self.stage.loss or np.ndim(value) == 0:
                merged[name] = sum(outputs[m][name] * (high - low) / batch
                                   for m, (low, high) in enumerate(bounds))
            else:
                merged[name] = np.concatenate([outputs[m][name]
                                               for m in range(len(bounds))])
        return merged

    def train(self, batches) -> list:
        """Run :meth:`step` on every minibatch of ``batches``; returns the losses (the
        last stage's; ``None`` elsewhere)."""
        return [self.step(inputs).get(self.stage.loss) for inputs in batches]

    def close(self) -> None:
        """Free the pipeline's and the replicas' communicators (collective)."""
        for network in (self.comm, self.replicas):
            split = network.comm
            network.close()
            split.Free()

    # -- results -----------------------------------------------------------------------
    def parameters(self) -> dict:
        """This stage's parameters by name (copies)."""
        network = self.executor.network
        return {name: np.array(network.fetch_tensor(name))
                for name in self.stage.parameters}

    def gather_parameters(self, root: int = 0) -> dict | None:
        """Every stage's parameters of pipeline 0, merged, at world rank ``root``
        (bookkeeping over the raw communicator; collective over the world)."""
        mine = self.parameters() if self.group == 0 else {}
        gathered = self.world.gather(mine, root=root)
        if self.world.Get_rank() != root:
            return None
        merged = {}
        for part in gathered:
            merged.update(part)
        return merged

    def traffic(self) -> dict:
        """Bytes and messages this rank sent and received: ``pipeline`` (activations and
        gradients, exact) and ``data_parallel`` (the allreduce of the stage's
        gradients, or None)."""
        return {"pipeline": self.comm.volume.total(),
                "data_parallel": (self.data_comm.volume.total()
                                  if self.data_comm is not None else None)}

    def boundary_bytes(self, batch: int) -> list:
        """Bytes each cut carries forward per microbatch of a ``batch``-sample minibatch
        (the same travel backward as gradients)."""
        size = microbatch_bounds(batch, self.microbatches)[0]
        n = size[1] - size[0]
        return [sum(t.nbytes(n) for t in stage.sends) for stage in self.all_stages[:-1]]

    def bubble(self, skip: int = 1, machine=None, batch: int | None = None,
               end: int | None = None) -> dict:
        """The bubble fraction of this pipeline (collective over the pipeline's ranks;
        every rank gets the result): ``measured`` (median over the steps from ``skip``
        to ``end``), ``gpipe_formula`` ((S − 1)/(M + S − 1)) and ``modelled`` (the
        timeline model of the measured per-stage forward and backward seconds, with
        ``machine``'s point-to-point times for the boundary bytes of a ``batch``-sample
        minibatch where both are given) with its ``modelled_step_seconds``, and the
        median measured ``step_seconds``."""
        records = self.comm.comm.allgather(self.step_records[skip:end])   # bookkeeping
        steps = min(len(r) for r in records)
        if steps == 0:
            raise Deep500Error(f"PipelineParallel.bubble: no steps after the first {skip} "
                               f"to measure; train more steps")
        measured, makespans = [], []
        for k in range(steps):
            makespan = max(r[k]["makespan"] for r in records)
            busy = sum(r[k]["forward"] + r[k]["backward"] for r in records)
            measured.append(1.0 - busy / (self.stages * makespan))
            makespans.append(makespan)
        forward = [float(np.median([x["forward"] for x in r[:steps]])) / self.microbatches
                   for r in records]
        backward = [float(np.median([x["backward"] for x in r[:steps]])) / self.microbatches
                    for r in records]
        bytes_per_cut = (self.boundary_bytes(batch) if machine is not None and batch
                         else None)
        model = predict_pipeline_step(forward, backward, self.microbatches,
                                      self.schedule_name, bytes_per_cut, machine)
        return {"measured": float(np.median(measured)),
                "gpipe_formula": gpipe_bubble(self.stages, self.microbatches),
                "modelled": model.bubble_fraction,
                "modelled_step_seconds": model.step_seconds,
                "step_seconds": float(np.median(makespans)),
                "stage_forward_seconds": forward, "stage_backward_seconds": backward,
                "steps": steps}
