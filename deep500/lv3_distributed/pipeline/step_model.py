"""The modelled step of a pipeline: a timeline of every stage's forward and backward
passes under a schedule, with the transfers between stages.

Inputs: per stage, the seconds of one microbatch's forward and backward (from a
measured profile or a model), and the bytes a stage sends to the next per microbatch
(activations forward; their gradients, of the same size, backward). A transfer costs
the machine model's point-to-point time ``α + β·n`` (``MachineModel.p2p_time``,
Hockney's model) or zero without a machine.

Each stage runs its schedule's operations in order; an operation starts when its stage
is free and its input has arrived: the forward of microbatch m on stage s needs the
forward of m on s − 1 plus the transfer; the backward of m on s needs the backward of m
on s + 1 plus the transfer. The step ends with the last backward (the update is not
part of the pipeline's makespan).

Bubble fraction: the share of stage-time idle, ``1 − Σ_s busy_s / (S · T)``. With
equal stages and free transfers it is ``(S − 1) / (M + S − 1)`` for GPipe (Huang et al.,
NeurIPS 2019, §2.2; :func:`gpipe_bubble`), and the same for 1F1B (Narayanan et al.,
SC'21, §2.2.1).
"""
from __future__ import annotations

from dataclasses import dataclass

from deep500.lv3_distributed.pipeline.schedule import BACKWARD, FORWARD, schedule_named
from deep500.utils.errors import Deep500Error


def gpipe_bubble(stages: int, microbatches: int) -> float:
    """GPipe's bubble fraction ``(S − 1) / (M + S − 1)`` (equal stages, free transfers)."""
    if stages < 1 or microbatches < 1:
        raise Deep500Error(f"Pipeline: stages={stages} and microbatches={microbatches} "
                           f"must both be at least 1")
    return (stages - 1) / (microbatches + stages - 1)


@dataclass
class PipelineStepPrediction:
    """A modelled pipeline step: ``step_seconds`` (makespan), ``bubble_fraction``,
    ``busy_seconds`` per stage and the ``timeline`` ``[(stage, kind, microbatch, start,
    end)]``."""
    step_seconds: float
    bubble_fraction: float
    busy_seconds: list
    timeline: list

    def to_dict(self) -> dict:
        return {"step_seconds": self.step_seconds, "bubble_fraction": self.bubble_fraction,
                "busy_seconds": list(self.busy_seconds)}


def predict_pipeline_step(forward_seconds, backward_seconds, microbatches: int,
                          schedule: str = "gpipe", boundary_bytes=None,
                          machine=None) -> PipelineStepPrediction:
    """The modelled step of ``len(forward_seconds)`` stages (see the module docstring).
    ``boundary_bytes[s]``: bytes stage s sends to s + 1 per microbatch (S − 1 numbers);
    ``machine``: a :class:`~deep500.utils.machine.MachineModel` pricing them."""
    stages = len(forward_seconds)
    if len(backward_seconds) != stages:
        raise Deep500Error(f"Pipeline step model: {stages} forward times but "
                           f"{len(backward_seconds)} backward times; give one per stage")
    boundary_bytes = list(boundary_bytes or [0] * (stages - 1))
    if len(boundary_bytes) != stages - 1:
        raise Deep500Error(f"Pipeline step model: boundary_bytes needs {stages - 1} "
                           f"numbers (one per cut), got {len(boundary_bytes)}")
    transfer = [machine.p2p_time(n) if machine is not None and n else 0.0
                for n in boundary_bytes]
    order = [list(schedule_named(schedule)(s, stages, microbatches)) for s in range(stages)]
    done = {}                      # (stage, kind, microbatch) -> end time
    free = [0.0] * stages
    position = [0] * stages
    timeline = []
    remaining = sum(len(o) for o in order)
    while remaining:
        progressed = False
        for s in range(stages):
            while position[s] < len(order[s]):
                kind, m = order[s][position[s]]
                if kind == FORWARD:
                    ready = 0.0 if s == 0 else done.get((s - 1, FORWARD, m))
                    ready = ready if s == 0 or ready is None else ready + transfer[s - 1]
                    cost = forward_seconds[s]
                else:
                    ready = done.get((s, FORWARD, m)) if s == stages - 1 else \
                        done.get((s + 1, BACKWARD, m))
                    ready = ready if s == stages - 1 or ready is None else \
                        ready + transfer[s]
                    cost = backward_seconds[s]
                if ready is None:
                    break
                start = max(free[s], ready)
                end = start + cost
                done[(s, kind, m)] = free[s] = end
                timeline.append((s, kind, m, start, end))
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise Deep500Error(f"Pipeline step model: schedule {schedule!r} deadlocks")
    makespan = max(free)
    busy = [microbatches * (forward_seconds[s] + backward_seconds[s])
            for s in range(stages)]
    bubble = 1.0 - sum(busy) / (stages * makespan) if makespan > 0 else 0.0
    return PipelineStepPrediction(makespan, bubble, busy, timeline)
