"""``PipelineTraining``: a :class:`PipelineParallel` as the optimizer a
:class:`~deep500.lv2_training.trainer.Trainer` drives, so that ``d5.test_training``
and the Level-3 report measure a pipeline as they measure the data-parallel schemes.

* ``step(inputs)`` runs the pipeline's step; the last stage's loss and outputs are then
  shared with the pipeline's other ranks (pickled over the raw communicator, Deep500's
  bookkeeping, not counted as the scheme's traffic), so every rank's trainer records
  the minibatch's loss and accuracy.
* ``executor`` is the whole model on every rank: at the end of each epoch the stages'
  parameters are gathered into it (bookkeeping) and the trainer's test pass runs on it.
* ``end_epoch`` returns, per rank: ``phase_times`` (``compute``: the stage's forward
  and backward passes; ``communication``: waiting for activations and gradients, and
  the replicas' allreduce; ``update``), bytes and messages sent and received (between
  stages and in the allreduce, counted exactly), and ``pipeline``: the epoch's bubble
  fraction measured, GPipe's formula and the timeline model's, with the measured and
  modelled step seconds (:meth:`PipelineParallel.bubble`; the model's messages cost
  the machine file's α + β·n where one is given, else nothing).
"""
from __future__ import annotations

from deep500.lv2_training.optimizer import Optimizer
from deep500.lv3_distributed.communication import CommunicationNetwork

VOLUME_FIELDS = ("bytes_sent", "bytes_received", "messages_sent", "messages_received")
PHASES = ("compute", "communication", "update")


class PipelineTraining(Optimizer):
    """The trainer's optimizer for ``pipeline`` (a :class:`PipelineParallel`), whose
    test passes run on ``executor`` (the whole model, built from the same ONNX file);
    ``machine`` (a :class:`~deep500.utils.machine.MachineModel`, optional) prices the
    messages of the modelled step."""
    consistent = True

    def __init__(self, pipeline, executor, machine=None):
        super().__init__(executor, pipeline.graph_loss)
        self.pipeline = pipeline
        self.machine = machine    # prices the modelled step's messages (MachineModel)
        self.comm = CommunicationNetwork(pipeline.world)   # for the statistics' gather
        self.rank, self.size = self.comm.rank, self.comm.size
        self._epoch_first_step = 0
        self._volume_before = self._volume()

    @property
    def name(self) -> str:
        p = self.pipeline
        return (f"PipelineParallel(stages={p.stages}, microbatches={p.microbatches}, "
                f"schedule={p.schedule_name}, data_parallel={p.data_parallel})")

    @property
    def learning_rate(self):
        return getattr(self.pipeline.base, "learning_rate", None)

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        self.pipeline.base.learning_rate = value

    def hyperparameters(self) -> dict:
        p = self.pipeline
        return {**p.base.hyperparameters(), "stages": p.stages,
                "microbatches": p.microbatches, "schedule": p.schedule_name,
                "data_parallel": p.data_parallel, "cuts": p.cuts}

    # -- training ----------------------------------------------------------------------
    def step(self, inputs: dict) -> dict:
        self._before_step(inputs)
        outputs = self.pipeline.step(inputs)
        outputs = self.pipeline.comm.comm.bcast(outputs, root=self.pipeline.stages - 1)
        self.step_count += 1
        self._after_step(inputs, outputs)
        return outputs

    @property
    def stops_together(self) -> bool:
        return self.size > 1

    def agree_to_stop(self, reason: str | None) -> str | None:
        for rank, wanted in enumerate(self.comm.comm.allgather(reason)):
            if wanted is not None:
                return f"{wanted} (on rank {rank})"
        return None

    # -- measurements --------------------------------------------------------------------
    def _volume(self) -> dict:
        totals = [self.pipeline.comm.volume.total()]
        if self.pipeline.data_comm is not None:
            totals.append(self.pipeline.data_comm.volume.total())
        summed = {k: sum(t[k] for t in totals) for k in VOLUME_FIELDS}
        summed["counted"] = ("exact" if all(t["counted"] == "exact" for t in totals)
                             else "includes modelled")
        return summed

    def _gather_parameters(self) -> None:
        """Every stage's parameters into the whole model's executor (bookkeeping)."""
        parts = self.pipeline.comm.comm.allgather(self.pipeline.parameters())
        network = self.executor.network
        for part in parts:
            for name, value in part.items():
                network.feed_tensor(name, value, is_param=True)

    def end_epoch(self) -> dict:
        p = self.pipeline
        self._gather_parameters()
        records = p.step_records[self._epoch_first_step:]
        skip = self._epoch_first_step + (1 if self._epoch_first_step == 0 else 0)
        if len(p.step_records) > skip:
            bubble = p.bubble(skip=skip, machine=self.machine, batch=p.last_batch)
        else:
            p.comm.comm.allgather(None)   # keep the ranks' collectives matched
            bubble = None
        self._epoch_first_step = len(p.step_records)
        now = self._volume()
        before, self._volume_before = self._volume_before, now
        phases = {"compute": sum(r["forward"] + r["backward"] for r in records),
                  "communication": sum(r["wait"] + r["allreduce"] for r in records),
                  "update": sum(r["update"] for r in records)}
        return {"phase_times": phases,
                **{k: now[k] - before[k] for k in VOLUME_FIELDS},
                "counted": now["counted"], "replica_divergence": 0.0,
                "rank": self.rank, "size": self.size,
                "pipeline": {"stage": p.stage_index, "group": p.group, "cuts": p.cuts,
                             "bubble": bubble,
                             "forward_seconds": sum(r["forward"] for r in records),
                             "backward_seconds": sum(r["backward"] for r in records)}}

    def analytic_traffic(self, steps: int, batch: int | None = None) -> dict | None:
        """Bytes this rank sends and receives in ``steps`` steps of ``batch`` samples per
        pipeline (default: the last step's): every sample's boundary tensors forward
        and their gradients backward at each cut next to this stage, and the ring
        allreduce of the stage's gradients over ``data_parallel`` replicas."""
        p = self.pipeline
        batch = batch or getattr(p, "last_batch", None)
        if batch is None:
            return None
        per_sample = p.boundary_bytes(p.microbatches)   # one sample per microbatch
        s = p.stage_index
        pipeline = batch * ((per_sample[s] if s < p.stages - 1 else 0) +
                            (per_sample[s - 1] if s > 0 else 0))
        sent = received = steps * pipeline
        if p.data_comm is not None and p.stage.parameters:
            count = sum(v.size for v in p.parameters().values())
            itemsize = next(iter(p.parameters().values())).dtype.itemsize
            traffic = p.data_comm.allreduce_traffic(count, itemsize)
            sent += steps * traffic.bytes_sent
            received += steps * traffic.bytes_received
        return {"bytes_sent": int(sent), "bytes_received": int(received),
                "model": "boundary tensors per sample x batch, each way; ring allreduce "
                         "of the stage's gradients over its replicas"}

    def distributed_summary(self, statistics) -> dict | None:
        from deep500.lv3_distributed.distributed_training import summarize
        return summarize(self, statistics)

    def close(self) -> None:
        """Free the communicators (collective)."""
        self.comm.close()
        self.pipeline.close()

