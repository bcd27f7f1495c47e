"""Trajectory divergence: how far two optimizers drift apart when they train the same
network from the same weights on the same minibatches.

Two implementations of one algorithm (the reference Adam and ``torch.optim.Adam``, or
Keras' Adam) should follow the same trajectory up to floating-point rounding; a
formula that differs (where epsilon is added, a bias correction left out) shows as a
divergence that grows with the steps. This is the experiment of Fig. 11 of the Deep500
paper (Ben-Nun et al., IPDPS 2019): at every step, the L2 and L∞ norm of the difference
of every parameter, plotted on a log scale (:mod:`deep500.report.trajectory_plot`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from deep500.lv2_training.optimizer import Optimizer
from deep500.utils.errors import Deep500Error
from deep500.utils.metric import to_jsonable


@dataclass
class TrajectoryDivergence:
    """The divergence of optimizer ``b`` from optimizer ``a``, after each step.

    Attributes:
        label_a, label_b: what was compared (``framework:optimizer`` by default).
        parameters: the parameter names, in order.
        steps: the step numbers (1 = after the first update).
        l2, linf: ``{parameter: [‖a − b‖₂ or max|a − b| after each step]}``.
        total_l2: the L2 norm of the difference of all parameters together.
        total_linf: the largest difference over all parameters.
        norm_a: the L2 norm of all of ``a``'s parameters together (the scale that
            ``relative_l2`` divides by).
        loss_a, loss_b: each optimizer's loss at each step (before its update).
        conditions: optimizers, frameworks, hyper-parameters, batch sizes.
    """
    label_a: str
    label_b: str
    parameters: list
    steps: list = field(default_factory=list)
    l2: dict = field(default_factory=dict)
    linf: dict = field(default_factory=dict)
    total_l2: list = field(default_factory=list)
    total_linf: list = field(default_factory=list)
    norm_a: list = field(default_factory=list)
    loss_a: list = field(default_factory=list)
    loss_b: list = field(default_factory=list)
    conditions: dict = field(default_factory=dict)

    @property
    def relative_l2(self) -> list:
        """``total_l2 / norm_a`` after each step."""
        return [d / n if n > 0 else (0.0 if d == 0 else math.inf)
                for d, n in zip(self.total_l2, self.norm_a)]

    @property
    def max_relative_l2(self) -> float:
        return max(self.relative_l2, default=0.0)

    @property
    def max_linf(self) -> float:
        return max(self.total_linf, default=0.0)

    def grouped(self, groups: "dict[str, list[str]] | Callable[[str], str] | None" = None
                ) -> dict:
        """``{group: (l2 series, linf series)}``: parameters combined into groups (L2
        norms combine as the root of the sum of squares, L∞ as the maximum).

        ``groups`` is ``{group: [parameter, ...]}``, a function from a parameter name to
        its group, or ``None``: one group per parameter."""
        if groups is None:
            members = {p: [p] for p in self.parameters}
        elif callable(groups):
            members = {}
            for p in self.parameters:
                members.setdefault(groups(p), []).append(p)
        else:
            members = {g: list(ps) for g, ps in groups.items()}
            unknown = sorted({p for ps in members.values() for p in ps}
                             - set(self.parameters))
            if unknown:
                raise Deep500Error(f"Trajectory divergence: groups name parameters "
                                   f"{unknown[:5]} that were not compared")
        result = {}
        for group, names in members.items():
            l2 = np.sqrt(np.sum([np.square(self.l2[p]) for p in names], axis=0))
            linf = np.max([self.linf[p] for p in names], axis=0)
            result[group] = (l2.tolist(), linf.tolist())
        return result

    def summary(self) -> dict:
        """Headline numbers: the largest and final divergences and losses."""
        return {"steps": len(self.steps), "max_total_l2": max(self.total_l2, default=0.0),
                "max_total_linf": self.max_linf, "max_relative_l2": self.max_relative_l2,
                "final_total_l2": self.total_l2[-1] if self.total_l2 else 0.0,
                "final_loss_a": self.loss_a[-1] if self.loss_a else None,
                "final_loss_b": self.loss_b[-1] if self.loss_b else None}

    def to_dict(self) -> dict:
        return to_jsonable({"test": "trajectory_divergence", "label_a": self.label_a,
                            "label_b": self.label_b, "parameters": self.parameters,
                            "steps": self.steps, "l2": self.l2, "linf": self.linf,
                            "total_l2": self.total_l2, "total_linf": self.total_linf,
                            "norm_a": self.norm_a, "loss_a": self.loss_a,
                            "loss_b": self.loss_b, "conditions": self.conditions,
                            "summary": self.summary()})

    @classmethod
    def from_dict(cls, data: dict) -> "TrajectoryDivergence":
        return cls(**{k: data[k] for k in (
            "label_a", "label_b", "parameters", "steps", "l2", "linf", "total_l2",
            "total_linf", "norm_a", "loss_a", "loss_b", "conditions")})

    def __str__(self) -> str:
        s = self.summary()
        return (f"Trajectory divergence of {self.label_b} from {self.label_a} over "
                f"{s['steps']} steps: max L2 {s['max_total_l2']:.3g} (relative "
                f"{s['max_relative_l2']:.3g}), max L∞ {s['max_total_linf']:.3g}")


def _label(optimizer: Optimizer) -> str:
    return f"{optimizer.executor.framework}:{optimizer.name}"


def _minibatches(batches: Iterable[dict], steps: int):
    """``steps`` minibatches from ``batches``, iterated again when it ends (a Sampler's
    next epoch, or a list from its start)."""
    iterator, taken, fresh = iter(batches), 0, True
    while taken < steps:
        try:
            batch = next(iterator)
        except StopIteration:
            if fresh:
                raise Deep500Error(f"trajectory_divergence: the minibatches ran out after "
                                   f"{taken} of {steps} steps and iterating them again "
                                   f"gave none; pass a Sampler or a list") from None
            iterator, fresh = iter(batches), True
            continue
        fresh = False
        taken += 1
        yield batch


def _parameter_names(optimizer_a: Optimizer, optimizer_b: Optimizer,
                     parameters) -> list:
    names_a = list(optimizer_a.network.get_params())
    names_b = set(optimizer_b.network.get_params())
    if parameters is None:
        missing = [p for p in names_a if p not in names_b]
        extra = sorted(names_b - set(names_a))
        if missing or extra:
            raise Deep500Error(f"trajectory_divergence: the two networks have different "
                               f"parameters (only in a: {missing[:5]}, only in b: "
                               f"{extra[:5]}); train the same ONNX model with both, or "
                               f"pass parameters=[...] to compare a common subset")
        return names_a
    parameters = list(parameters)
    missing = [p for p in parameters if p not in names_b or p not in set(names_a)]
    if missing:
        raise Deep500Error(f"trajectory_divergence: parameters {missing[:5]} are not "
                           f"parameters of both networks")
    return parameters


def trajectory_divergence(optimizer_a: Optimizer, optimizer_b: Optimizer,
                          batches: Iterable[dict], steps: int, copy_weights: bool = True,
                          parameters: Iterable[str] | None = None,
                          label_a: str | None = None,
                          label_b: str | None = None) -> TrajectoryDivergence:
    """Trains with both optimizers, step by step on the same minibatches, and records
    after each step how far ``b``'s parameters are from ``a``'s.

    Args:
        optimizer_a, optimizer_b: the two optimizers (any Level-2 :class:`Optimizer`,
            over any executors) of two networks with the same parameter names (e.g. the
            same ONNX model loaded twice).
        batches: minibatches (a Sampler, a list, any iterable; iterated again if it ends
            before ``steps``). Each minibatch goes to ``a`` and then to ``b``.
        steps: how many steps to take.
        copy_weights: first copy every parameter of ``a``'s network that ``b``'s has
            into ``b``'s (``fetch_tensor`` / ``feed_tensor``), so both start from the
            same point.
        parameters: compare only these parameters (default: all, which must match).
        label_a, label_b: names for reports (default ``framework:optimizer``).
    """
    steps = int(steps)
    if steps < 1:
        raise Deep500Error(f"trajectory_divergence: steps must be at least 1, got {steps}")
    if optimizer_a is optimizer_b or optimizer_a.network is optimizer_b.network:
        raise Deep500Error("trajectory_divergence: the two optimizers must train two "
                           "different networks (build the executor twice)")
    names = _parameter_names(optimizer_a, optimizer_b, parameters)
    network_a, network_b = optimizer_a.network, optimizer_b.network
    if copy_weights:
        common = set(network_b.get_params())
        for name in [p for p in network_a.get_params() if p in common]:
            # A copy: a network may hand out (and an update rule may write into) the
            # very array it stores.
            network_b.feed_tensor(name, np.array(network_a.fetch_tensor(name), copy=True),
                                  is_param=True)
    result = TrajectoryDivergence(label_a or _label(optimizer_a),
                                  label_b or _label(optimizer_b), names,
                                  l2={p: [] for p in names}, linf={p: [] for p in names})
    batch_sizes = set()
    for step, batch in enumerate(_minibatches(batches, steps), start=1):
        outputs_a = optimizer_a.step(batch)
        outputs_b = optimizer_b.step(batch)
        result.loss_a.append(float(np.asarray(outputs_a[optimizer_a.loss])))
        result.loss_b.append(float(np.asarray(outputs_b[optimizer_b.loss])))
        squares = norm_squares = 0.0
        largest = 0.0
        for name in names:
            a = np.asarray(network_a.fetch_tensor(name), dtype=np.float64)
            difference = a - np.asarray(network_b.fetch_tensor(name), dtype=np.float64)
            square = float(np.vdot(difference, difference))
            biggest = float(np.max(np.abs(difference), initial=0.0))
            result.l2[name].append(math.sqrt(square))
            result.linf[name].append(biggest)
            squares += square
            norm_squares += float(np.vdot(a, a))
            largest = max(largest, biggest)
        result.steps.append(step)
        result.total_l2.append(math.sqrt(squares))
        result.total_linf.append(largest)
        result.norm_a.append(math.sqrt(norm_squares))
        batch_sizes.update(len(v) for v in batch.values() if np.ndim(v) > 0)
    result.conditions = {
        "optimizer_a": optimizer_a.name, "optimizer_b": optimizer_b.name,
        "framework_a": optimizer_a.executor.framework,
        "framework_b": optimizer_b.executor.framework,
        "hyperparameters_a": optimizer_a.hyperparameters(),
        "hyperparameters_b": optimizer_b.hyperparameters(),
        "network": network_a.name, "steps": steps, "copy_weights": bool(copy_weights),
        "batch_sizes": sorted(batch_sizes)}
    return result


__all__ = ["TrajectoryDivergence", "trajectory_divergence"]
