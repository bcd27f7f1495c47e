"""Per-layer profile of a network: measured forward and backward seconds per ONNX node,
the analytic predictions of them, and their errors.

Two analytic models:

* the **roofline** (``analytic_prediction``): max(FLOPs / peak, bytes / bandwidth)
  (``cost_model.roofline_time``) plus one fixed overhead per direction
  (``fit_overhead``);
* the **calibrated analytic** model (``calibrated_prediction``): per operator type and
  direction, t = o + s·max(compute, bytes / bandwidth) (``kernel_time``), compute
  being the measured seconds of the node's matrix products (``gemm_rate.GemmRate``)
  for Conv/Gemm/MatMul, and o (dispatch overhead of that type on that executor) and s
  (how far that type's implementation is from its roofline: im2col copies, pooling
  loops in NumPy) fitted on profiles of other networks by least absolute error, each
  profile's nodes relative to its pass time (``fit_calibration``).

Measurements of several rounds (each network measured in turn, then again) combine
with ``merge_profiles``.

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

import math
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


def timed_backprop_runs(executor, inputs: dict, loss: str = "loss", reruns: int = 5,
                        warmup: int = 2):
    """The OperatorTimes event of ``reruns`` runs of ``executor.inference_and_backprop``
    after ``warmup`` untimed ones: per run, each node's forward (``runs``) and backward
    (``backward_runs``) seconds."""
    from deep500.lv1_network.metrics import OperatorTimes
    times = OperatorTimes()
    executor.events.append(times)
    try:
        for i in range(warmup + reruns):
            if i == warmup:
                times.reset()
            executor.inference_and_backprop(inputs, loss)
    finally:
        executor.events.remove(times)
    return times


def measure_profile(model, executor, inputs: dict, loss: str = "loss", reruns: int = 5,
                    warmup: int = 2, name: str = "model", executor_name: str = "executor",
                    batch: int = 0, itemsize: int = 4) -> LayerProfile:
    """Run ``executor.inference_and_backprop`` ``warmup + reruns`` times with an
    OperatorTimes event and keep each node's median forward and backward seconds
    over the ``reruns`` timed runs (``deep500.OperatorTimes``)."""
    costs = network_costs(model, itemsize=itemsize)
    times = timed_backprop_runs(executor, inputs, loss, reruns, warmup)

    def medians(runs):
        names = {n for run in runs for n in run}
        return {n: float(np.median([run.get(n, 0.0) for run in runs])) for n in names}
    return LayerProfile(name, executor_name, int(batch), [c.node for c in costs],
                        {c.node: c for c in costs}, medians(times.runs),
                        medians(times.backward_runs))


_MERGE = {"median": np.median, "min": np.min}


def merge_profiles(profiles, statistic: str = "median") -> LayerProfile:
    """One profile from several of the same network, executor and batch measured at
    different times (rounds interleaved with other networks' measurements, so that a
    burst of load on a shared machine does not fall on one network only): each node's
    ``statistic`` over the profiles, "median" or "min" (the round least disturbed:
    contention from other jobs only adds time, so on a shared machine the smallest of
    a few rounds' medians is the most repeatable estimate of the undisturbed time)."""
    if statistic not in _MERGE:
        raise Deep500Error(f"merge_profiles statistic must be one of {sorted(_MERGE)}, "
                           f"not {statistic!r}")
    reduce = _MERGE[statistic]
    profiles = list(profiles)
    if not profiles:
        raise Deep500Error("merge_profiles got no profile")
    first = profiles[0]
    for p in profiles[1:]:
        if (p.model, p.executor, p.batch) != (first.model, first.executor, first.batch):
            raise Deep500Error(f"merge_profiles: {p.model}/{p.executor}/batch {p.batch} is "
                               f"not {first.model}/{first.executor}/batch {first.batch}; "
                               "merge only rounds of the same measurement")

    def median(direction):
        names = {n for p in profiles for n in p.measured(direction)}
        return {n: float(reduce([p.measured(direction).get(n, 0.0) for p in profiles]))
                for n in names}
    return LayerProfile(first.model, first.executor, first.batch, list(first.order),
                        dict(first.costs), median("forward"), median("backward"))


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


def kernel_time(cost: OperatorCost, machine, direction: str, threads: int = 1,
                gemm_rate=None) -> float:
    """The roofline of one pass with a size-dependent GEMM rate: max(compute, bytes /
    bandwidth), compute being Σ 2mnk / rate(m, n, k) over the pass's products
    (``OperatorCost.gemms``) when ``gemm_rate`` (a ``gemm_rate.GemmRate``) is given and
    the operator lowers to GEMMs, else FLOPs / peak (``cost_model.roofline_time``)."""
    machine = _machine(machine)
    gemms = cost.gemms(direction) if gemm_rate is not None else []
    if not gemms:
        return roofline_time(cost, machine, threads, direction)
    nbytes = cost.forward_bytes if direction == "forward" else cost.backward_bytes
    return max(gemm_rate.seconds(gemms), nbytes / machine.memory_bandwidth)


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])])


def _least_absolute(kernel, measured, weights=None) -> tuple:
    """(o, s) ≥ 0 minimising Σ w·|measured − o − s·kernel|: the training nodes' weighted
    total absolute error. For a given s the best o is the weighted median residual
    (clipped at 0); the error is convex in s, searched on a log grid from 0.1 to 100 and
    refined by golden section between the grid's neighbours."""
    kernel, measured = np.asarray(kernel, float), np.asarray(measured, float)
    weights = np.ones_like(kernel) if weights is None else np.asarray(weights, float)

    def error(s):
        o = max(_weighted_median(measured - s * kernel, weights), 0.0)
        return float((weights * np.abs(measured - o - s * kernel)).sum()), o
    if kernel.max() <= 0:
        return error(0.0)[1], 1.0
    grid = np.concatenate([[0.0], np.logspace(-1.0, 2.0, 61)])
    best = int(np.argmin([error(s)[0] for s in grid]))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(40):
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if error(a)[0] <= error(b)[0]:
            hi = b
        else:
            lo = a
    candidates = [grid[best], (lo + hi) / 2.0]
    s = min(candidates, key=lambda c: error(c)[0])
    return error(s)[1], float(s)


def fit_calibration(profiles, machine, threads: int = 1, gemm_rate=None,
                    min_nodes: int = 3) -> dict:
    """The calibrated analytic model's constants: for each operator type and direction,
    a fixed overhead o and a scale s of ``kernel_time`` (the roofline with the measured
    GEMM rate), t = o + s·kernel_time, fitted to the measured nodes of ``profiles`` by
    least absolute error, each node's error divided by its profile's pass time: the sum
    over training profiles of their weighted errors, so that each network counts
    equally (as each evaluated one does) and a small network's convolutions are not
    fitted with a large network's overhead. Types with fewer than
    ``min_nodes`` nodes use the fit over all types ("*"). Returns
    {(op_type, direction): (o seconds, s)}."""
    machine = _machine(machine)
    groups: dict = {}
    for profile in profiles:
        for direction in DIRECTIONS:
            measured = profile.measured(direction)
            step = sum(measured.values())
            for node, seconds in measured.items():
                cost = profile.costs.get(node)
                if cost is None:
                    continue
                pair = (kernel_time(cost, machine, direction, threads, gemm_rate), seconds,
                        1.0 / step)
                groups.setdefault((cost.op_type, direction), []).append(pair)
                groups.setdefault(("*", direction), []).append(pair)
    if not any(key[0] == "*" for key in groups):
        raise Deep500Error("fit_calibration got no measured node: give it profiles "
                           "(measure_profile) with forward and backward times")
    return {key: _least_absolute(*zip(*pairs)) for key, pairs in groups.items()
            if key[0] == "*" or len(pairs) >= min_nodes}


def calibrated_prediction(profile: LayerProfile, machine, calibration: dict,
                          threads: int = 1, gemm_rate=None) -> dict:
    """{direction: {node: o + s·kernel_time}} with the constants of ``fit_calibration``
    for the node's operator type (the all-types fit for a type it did not see)."""
    machine = _machine(machine)
    result = {}
    for d in DIRECTIONS:
        fallback = calibration.get(("*", d), (0.0, 1.0))
        result[d] = {}
        for node in profile.measured(d):
            cost = profile.costs.get(node)
            if cost is None:
                continue
            o, s = calibration.get((cost.op_type, d), fallback)
            result[d][node] = o + s * kernel_time(cost, machine, d, threads, gemm_rate)
    return result


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
