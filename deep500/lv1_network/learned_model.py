"""A learned per-layer time model: a scikit-learn regressor on operator shape features,
trained from measured profiles (``layer_profile.LayerProfile``), one regressor per
direction (forward, backward).

Features of a node (``features``): one-hot operator type; log FLOPs and log bytes of
the direction (``cost_model``); log of the batch, input and output channels, input
and output spatial size; the kernel's size; the arithmetic intensity
log(FLOPs / bytes); and, in the default model, three more kinds:

* the (m, n, k) of the matrix product the node lowers to (``OperatorCost.gemm``);
* the **measured seconds of those products** on this machine
  (``gemm_rate.GemmRate``, when one is given): a small GEMM's speed jumps with the
  BLAS's choice of kernel, which no smooth function of the sizes reproduces;
* the **context**: log of the bytes the whole network reads and writes in a forward
  pass (``network_bytes``), saturated at ``context_cap_bytes``. The same tiny node
  (a 10-class Gemm, the loss, a Flatten) takes 2-5× longer at the end of a network
  whose working set has evicted the caches than in a small MLP whose weights stay in
  L2; beyond a few MiB every node is already cold, and an unsaturated size only lets
  the trees split large convolutions by network size, which does not carry over to an
  unseen network.

The target is log seconds, so that the regressor fits relative errors over five
orders of magnitude of layer time. A sample's weight is its share of its own
profile's pass (seconds / Σ seconds of that profile and direction), no less than 1%
of the mean: each training network counts equally, as each evaluated network does in
the per-network time-weighted error, and within a network the nodes that dominate its
time are fitted best (Catalán's thesis trains its learned per-layer model on the same
kind of layer descriptors). The default regressor (``regressor="boosting"``) is the mean, in log seconds, of
``ensemble`` scikit-learn GradientBoostingRegressors that differ only in their random
subsamples (seeds ``seed``, ``seed + 1``, ...): one stochastic booster's prediction of
a node between two training shapes moves by several percent with its seed, the mean of
five much less. ``regressor="per_kernel_mlp"`` fits one multilayer perceptron per
operator type instead (``per_kernel_mlp``, as Catalán's thesis does), on the same
features, targets and weights.
"""
from __future__ import annotations

import math

import numpy as np

from deep500.lv0_operators.cost_model import SUPPORTED_OPS, OperatorCost
from deep500.lv1_network.per_kernel_mlp import PerKernelMLP
from deep500.utils.errors import Deep500Error, require

_OPS = sorted(SUPPORTED_OPS)
DEFAULT_CONTEXT_CAP = 8 << 20


def _log(x: float) -> float:
    return math.log(float(x) + 1.0)


def features(cost: OperatorCost, direction: str, network_bytes: float | None = None,
             kernel_s: float | None = None) -> list[float]:
    """The feature vector of one node (see the module docstring). ``network_bytes``
    adds the context and GEMM-size features, ``kernel_s`` (the measured seconds of
    the node's products, 0 for an operator without any) the GEMM-time feature."""
    flops = cost.forward_flops if direction == "forward" else cost.backward_flops
    nbytes = cost.forward_bytes if direction == "forward" else cost.backward_bytes
    x, y = cost.input_shape or (), cost.output_shape or ()
    batch = x[0] if len(x) else 0
    c_in = x[1] if len(x) > 1 else 0
    c_out = y[1] if len(y) > 1 else 0
    s_in = int(np.prod(x[2:])) if len(x) > 2 else 1
    s_out = int(np.prod(y[2:])) if len(y) > 2 else 1
    kernel = int(np.prod(cost.kernel)) if cost.kernel else 0
    onehot = [1.0 if cost.op_type == op else 0.0 for op in _OPS]
    row = onehot + [_log(flops), _log(nbytes), _log(batch), _log(c_in), _log(c_out),
                    _log(s_in), _log(s_out), _log(kernel), _log(flops) - _log(nbytes)]
    if network_bytes is not None:
        m, n, k = cost.gemm or (0, 0, 0)
        row += [_log(network_bytes), _log(m), _log(n), _log(k)]
    if kernel_s is not None:
        row.append(_log(kernel_s * 1e9))   # nanoseconds, so that log(x + 1) ≈ log x
    return row


def network_bytes(profile, cap: float | None = None) -> float:
    """Σ OperatorCost.forward_bytes over the profile's network (the bytes every node
    reads and writes once in a forward pass: how far the step's working set exceeds
    the caches), at most ``cap``."""
    total = float(sum(c.forward_bytes for c in profile.costs.values()))
    return total if cap is None else min(total, float(cap))


class LearnedLayerModel:
    """Predicts a node's forward and backward seconds from ``features``.

    Args:
        seed: the regressor's random state (results are reproducible).
        n_estimators, max_depth, learning_rate: of GradientBoostingRegressor.
        context: add the context (network bytes) and GEMM-size features.
        context_cap_bytes: where the context feature saturates.
        gemm_rate: a ``gemm_rate.GemmRate``; adds the measured GEMM-time feature.
        ensemble: boosted regressors averaged per direction (seeds seed, seed + 1, ...);
            the per-kernel MLP takes its own default (``per_kernel_mlp``).
        regressor: "boosting" (gradient-boosted trees over every operator type) or
            "per_kernel_mlp" (one MLP per operator type, ``per_kernel_mlp``).
    """

    REGRESSORS = ("boosting", "per_kernel_mlp")

    def __init__(self, seed: int = 0, n_estimators: int = 300, max_depth: int = 4,
                 learning_rate: float = 0.05, context: bool = True,
                 context_cap_bytes: float = DEFAULT_CONTEXT_CAP, gemm_rate=None,
                 ensemble: int = 5, regressor: str = "boosting"):
        if context_cap_bytes <= 0:
            raise Deep500Error(f"context_cap_bytes must be positive, got {context_cap_bytes}")
        self.params = dict(random_state=seed, n_estimators=n_estimators,
                           max_depth=max_depth, learning_rate=learning_rate, subsample=0.8)
        self.context, self.context_cap_bytes = context, context_cap_bytes
        if ensemble < 1:
            raise Deep500Error(f"ensemble must be at least 1 regressor, got {ensemble}")
        self.gemm_rate, self.ensemble = gemm_rate, int(ensemble)
        if regressor not in self.REGRESSORS:
            raise Deep500Error(f"regressor must be one of {', '.join(self.REGRESSORS)}, "
                               f"got {regressor!r}")
        self.regressor = regressor
        self.seed = seed
        self.models: dict = {}

    def _rows(self, profile, nodes, direction) -> np.ndarray:
        total = network_bytes(profile, self.context_cap_bytes) if self.context else None
        rows = []
        for node in nodes:
            cost = profile.costs[node]
            kernel_s = (self.gemm_rate.seconds(cost.gemms(direction))
                        if self.gemm_rate is not None else None)
            rows.append(features(cost, direction, total, kernel_s))
        return np.asarray(rows)

    def fit(self, profiles) -> "LearnedLayerModel":
        """Train on every measured node of ``profiles`` (a list of LayerProfile)."""
        for direction in ("forward", "backward"):
            blocks, target, weight, kinds = [], [], [], []
            for profile in profiles:
                measured = {n: s for n, s in profile.measured(direction).items()
                            if s > 0 and n in profile.costs}
                if not measured:
                    continue
                step = sum(measured.values())
                blocks.append(self._rows(profile, list(measured), direction))
                kinds += [profile.costs[n].op_type for n in measured]
                target += [math.log(s) for s in measured.values()]
                weight += [s / step for s in measured.values()]
            if len(target) < 5:
                continue
            weight = np.asarray(weight)
            # No node below 1% of the mean weight, so that small layers still shape the fit.
            weight = np.maximum(weight, 0.01 * weight.mean())
            X, y = np.vstack(blocks), np.asarray(target)
            if self.regressor == "per_kernel_mlp":
                self.models[direction] = PerKernelMLP(seed=self.seed).fit(
                    X, y, weight, kinds)
                continue
            sklearn_ensemble = require("sklearn.ensemble", "datasets",
                                       "The learned layer model")
            models = []
            for i in range(self.ensemble):
                params = dict(self.params, random_state=self.params["random_state"] + i)
                models.append(sklearn_ensemble.GradientBoostingRegressor(**params).fit(
                    X, y, sample_weight=weight))
            self.models[direction] = models
        if not self.models:
            raise Deep500Error("the learned layer model got fewer than 5 measured nodes "
                               "per direction: profile more models or batch sizes")
        return self

    def predict(self, profile) -> dict:
        """{direction: {node: seconds}} for the nodes ``profile`` measured."""
        result = {}
        for direction in ("forward", "backward"):
            nodes = [n for n in profile.measured(direction) if n in profile.costs]
            if not nodes:
                result[direction] = {}
                continue
            models = self.models.get(direction)
            if models is None:
                raise Deep500Error(f"the learned layer model was not trained for the "
                                   f"{direction} pass: train it on profiles with backprop")
            X = self._rows(profile, nodes, direction)
            if isinstance(models, PerKernelMLP):
                log_seconds = models.predict(X, [profile.costs[n].op_type for n in nodes])
            else:
                log_seconds = np.mean([model.predict(X) for model in models], axis=0)
            result[direction] = dict(zip(nodes, np.exp(log_seconds).tolist()))
        return result
