"""A learned per-layer time model: a scikit-learn regressor on operator shape features,
trained from measured profiles (``layer_profile.LayerProfile``), one regressor per
direction (forward, backward).

Features of a node (``features``): one-hot operator type; log FLOPs and log bytes of
the direction (``cost_model``); log of the batch, input and output channels, input
and output spatial size; the kernel's size; and the roofline-free arithmetic
intensity log(FLOPs / bytes). The target is log seconds, so that the regressor fits
relative errors over five orders of magnitude of layer time; samples are weighted
by their measured time so the large layers, which dominate the time-weighted error,
are fitted best (Catalán's thesis trains its learned per-layer model on the same kind
of layer descriptors). The regressor is scikit-learn's GradientBoostingRegressor.
"""
from __future__ import annotations

import math

import numpy as np

from deep500.lv0_operators.cost_model import SUPPORTED_OPS, OperatorCost
from deep500.utils.errors import Deep500Error, require

_OPS = sorted(SUPPORTED_OPS)


def _log(x: float) -> float:
    return math.log(float(x) + 1.0)


def features(cost: OperatorCost, direction: str) -> list[float]:
    """The feature vector of one node (see the module docstring)."""
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
    return onehot + [_log(flops), _log(nbytes), _log(batch), _log(c_in), _log(c_out),
                     _log(s_in), _log(s_out), _log(kernel), _log(flops) - _log(nbytes)]


class LearnedLayerModel:
    """Predicts a node's forward and backward seconds from ``features``.

    Args:
        seed: the regressor's random state (results are reproducible).
        n_estimators, max_depth, learning_rate: of GradientBoostingRegressor.
    """

    def __init__(self, seed: int = 0, n_estimators: int = 300, max_depth: int = 3,
                 learning_rate: float = 0.05):
        self.params = dict(random_state=seed, n_estimators=n_estimators,
                           max_depth=max_depth, learning_rate=learning_rate, subsample=0.8)
        self.models: dict = {}

    def fit(self, profiles) -> "LearnedLayerModel":
        """Train on every measured node of ``profiles`` (a list of LayerProfile)."""
        ensemble = require("sklearn.ensemble", "datasets", "The learned layer model")
        for direction in ("forward", "backward"):
            rows, target, weight = [], [], []
            for profile in profiles:
                for node, seconds in profile.measured(direction).items():
                    if seconds <= 0 or node not in profile.costs:
                        continue
                    rows.append(features(profile.costs[node], direction))
                    target.append(math.log(seconds))
                    weight.append(seconds)
            if len(rows) < 5:
                continue
            weight = np.asarray(weight)
            # Weight by time, but no layer less than 1% of the mean (so small layers
            # still shape the fit).
            weight = np.maximum(weight, 0.01 * weight.mean())
            model = ensemble.GradientBoostingRegressor(**self.params)
            model.fit(np.asarray(rows), np.asarray(target), sample_weight=weight)
            self.models[direction] = model
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
            model = self.models.get(direction)
            if model is None:
                raise Deep500Error(f"the learned layer model was not trained for the "
                                   f"{direction} pass: train it on profiles with backprop")
            X = np.asarray([features(profile.costs[n], direction) for n in nodes])
            result[direction] = dict(zip(nodes, np.exp(model.predict(X)).tolist()))
        return result
