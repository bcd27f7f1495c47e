"""Pipeline schedules: the order in which one stage runs the forward and backward
passes of a minibatch's microbatches.

* ``gpipe`` (Huang et al., "GPipe", NeurIPS 2019, §2.2): every microbatch forward,
  then every microbatch backward; the update follows the last backward (a flush).
* ``1f1b`` (PipeDream-Flush: Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
  Training", ICML 2021, §3; the schedule of Megatron-LM, Narayanan et al., SC'21,
  §2.2.1): stage ``s`` of ``S`` runs ``min(S - s - 1, M)`` warm-up forwards, then
  alternates one forward and one backward, then drains the remaining backwards. Its
  bubble is GPipe's; at most ``S - s`` microbatches are in flight on a stage instead
  of ``M``.

A schedule is a list of ``(FORWARD | BACKWARD, microbatch)``.
"""
from __future__ import annotations

from deep500.utils.errors import Deep500Error

FORWARD, BACKWARD = "forward", "backward"


def gpipe(stage: int, stages: int, microbatches: int) -> list:
    """All forwards, then all backwards, in microbatch order."""
    return ([(FORWARD, m) for m in range(microbatches)] +
            [(BACKWARD, m) for m in range(microbatches)])


def one_forward_one_backward(stage: int, stages: int, microbatches: int) -> list:
    """Warm-up forwards, one forward one backward in turn, then the cool-down
    backwards."""
    warmup = min(stages - stage - 1, microbatches)
    order = [(FORWARD, m) for m in range(warmup)]
    for index in range(microbatches - warmup):
        order.append((FORWARD, warmup + index))
        order.append((BACKWARD, index))
    order += [(BACKWARD, m) for m in range(microbatches - warmup, microbatches)]
    return order


SCHEDULES = {"gpipe": gpipe, "1f1b": one_forward_one_backward}


def schedule_named(name: str):
    """The schedule function called ``name`` (checked once, where a name enters)."""
    if name not in SCHEDULES:
        raise Deep500Error(f"Pipeline: unknown schedule {name!r}; use one of "
                           f"{sorted(SCHEDULES)}")
    return SCHEDULES[name]


def in_flight(order: list) -> int:
    """The largest number of microbatches whose forward has run and backward not yet
    (what a stage keeps in memory)."""
    live = peak = 0
    for kind, _ in order:
        live += 1 if kind == FORWARD else -1
        peak = max(peak, live)
    return peak
