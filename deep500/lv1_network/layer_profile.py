"""Per-layer profile of a network: measured forward and backward seconds per ONNX node,
the analytic (roofline) and learned predictions of them, and their errors.

The error of a model over the nodes of one training step is the **time-weighted
error** of Catalán's thesis (per-layer time models, its Table of weighted errors;
the weighting of PyDTNN's per-layer simulation):

    weighted error = Σ_i |pred_i − meas_i| / Σ_i meas_i

over the nodes i of the step (forward and backward separately, or both together):
a layer's error counts in proportion to its share of the step, so a 50% error on a
1 µs Relu does not weigh like one on the convolution that takes half of the step.
The per-step relative error ``|Σ_i pred_i − Σ_i meas_i| / Σ_i meas_i`` is the error
of the predicted step time (errors of opposite sign cancel in it, not in the
weighted error, which bounds it from above).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from deep500.lv0_operators.cost_model import OperatorCost, network_costs, roofline_time
from deep500.utils.errors import Deep500Error

DIRECTIONS = ("forward", "backward")


@dataclass
class LayerProfile:
    """Median measured seconds per node, forward and backward, with each node's cost.

    ``forward`` and ``backward`` map node name → seconds; ``costs`` node name →
    OperatorCost; ``order`` is the graph order; ``model``, ``executor`` and ``batch``
    label the profile (what the learned model is trained and evaluated on).
    """
    model: str
    executor: str
    batch: int
    order: list
    costs: dict
    forward: dict
    backward: dict = field(default_factory=dict)

    def measured(self, direction: str) -> dict:
        if direction not in DIRECTIONS:
            raise Deep500Error(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        return self.forward if direction == "forward" else self.backward


def measure_profile(model, executor, inputs: dict, loss: str = "loss", reruns: int = 5,
                    warmup: int = 2, name: str = "model", executor_name: str = "executor",
                    batch: int = 0, itemsize: int = 4) -> LayerProfile:
    """Run ``executor.inference_and_backprop`` ``warmup + reruns`` times with an
    OperatorTimes event and keep each node's median forward and backward seconds
    over the ``reruns`` timed runs (``deep500.OperatorTimes``)."""
    from deep500.lv1_network.metrics import OperatorTimes
    costs = network_costs(model, itemsize=itemsize)
    times = OperatorTimes()
    executor.events.append(times)
    try:
        for i in range(warmup + reruns):
            if i == warmup:
                times.reset()
            executor.inference_and_backprop(inputs, loss)
    finally:
        executor.events.remove(times)

    def medians(runs):
        names = {n for run in runs for n in run}
        return {n: float(np.median([run.get(n, 0.0) for run in runs])) for n in names}
    return LayerProfile(name, executor_name, int(batch), [c.node for c in costs],
                        {c.node: c for c in costs}, medians(times.runs),
                        medians(times.backward_runs))


def _machine(machine):
    if isinstance(machine, str):
        from deep500.utils.machine import load_machine
        return load_machine(machine)
    return machine


def fit_overhead(profiles, machine, threads: int = 1, quantile: float = 0.25) -> dict:
    """The fixed per-node time of each direction: the median measured time of the
    nodes whose roofline time is in the lowest ``quantile`` (dispatch and Python
    overhead that neither FLOPs nor bytes explain). Returns {direction: seconds}."""
    machine = _machine(machine)
    result = {}
    for direction in DIRECTIONS:
        pairs = []
        for profile in profiles:
            for node, seconds in profile.measured(direction).items():
                cost = profile.costs.get(node)
                if cost is not None:
                    pairs.append((roofline_time(cost, machine, threads, direction), seconds))
        if not pairs:
            result[direction] = 0.0
            continue
        cut = np.quantile([p for p, _ in pairs], quantile)
        result[direction] = float(np.median([m for p, m in pairs if p <= cut]))
    return result


def analytic_prediction(profile: LayerProfile, machine, threads: int = 1,
                        overhead: dict | None = None) -> dict:
    """{direction: {node: roofline seconds (+ overhead[direction])}} for the nodes the
    profile measured (``cost_model.roofline_time``)."""
    machine = _machine(machine)
    overhead = overhead or {}
    return {d: {node: roofline_time(profile.costs[node], machine, threads, d,
                                    overhead.get(d, 0.0))
                for node in profile.measured(d) if node in profile.costs}
            for d in DIRECTIONS}


def weighted_error(predicted: dict, measured: dict) -> float:
    """Σ_i |pred_i − meas_i| / Σ_i meas_i over the nodes of ``measured`` (the thesis'
    time-weighted error; a node without a prediction raises)."""
    missing = [n for n in measured if n not in predicted]
    if missing:
        raise Deep500Error(f"no prediction for nodes {missing}: give them an analytic "
                           "cost or a profile")
    total = sum(measured.values())
    if total <= 0:
        raise Deep500Error("the measured times sum to zero: nothing to compare with")
    return sum(abs(predicted[n] - m) for n, m in measured.items()) / total


def step_error(predicted: dict, measured: dict) -> float:
    """|Σ_i pred_i − Σ_i meas_i| / Σ_i meas_i: the relative error of the step time."""
    total = sum(measured.values())
    if total <= 0:
        raise Deep500Error("the measured times sum to zero: nothing to compare with")
    return abs(sum(predicted[n] for n in measured) - total) / total


def compare(profile: LayerProfile, predicted: dict) -> dict:
    """Errors of ``predicted`` ({direction: {node: s}}) against the profile: per
    direction and for forward + backward together (the whole step), the weighted and
    step errors, and the layers sorted by absolute error (``worst``)."""
    report = {}
    both_pred, both_meas = {}, {}
    for d in DIRECTIONS:
        meas = profile.measured(d)
        if not meas:
            continue
        pred = predicted[d]
        rows = sorted(((n, profile.costs[n].op_type, pred[n], m) for n, m in meas.items()),
                      key=lambda r: -abs(r[2] - r[3]))
        report[d] = {"weighted_error": weighted_error(pred, meas),
                     "step_error": step_error(pred, meas),
                     "measured_s": sum(meas.values()), "predicted_s": sum(pred[n] for n in meas),
                     "worst": rows}
        both_pred.update({(d, n): pred[n] for n in meas})
        both_meas.update({(d, n): m for n, m in meas.items()})
    if both_meas:
        report["step"] = {"weighted_error": weighted_error(both_pred, both_meas),
                          "step_error": step_error(both_pred, both_meas)}
    return report


def costs_for(profile: LayerProfile) -> list[OperatorCost]:
    return [profile.costs[n] for n in profile.order]
