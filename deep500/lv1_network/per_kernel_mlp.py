"""Per-kernel multilayer perceptrons: the learned layer model's second regressor
(``LearnedLayerModel(regressor="per_kernel_mlp")``), one scikit-learn ``MLPRegressor``
per operator type, as Catalán's thesis learns one network per kind of kernel
(convolution, GEMM, element-wise, ...) from layer descriptors.

Inputs are standardised per kernel (``StandardScaler``: log sizes span different
ranges per kind). An operator type with fewer than ``min_samples`` training rows, or
one never seen in training, is predicted by one MLP trained on every row (the one-hot
operator type is then among its features). Each prediction is the mean of ``ensemble``
networks that differ only in their initialisation seed: a small network's fit moves
with its seed, and the mean of a few much less.
"""
from __future__ import annotations

import warnings
from collections import defaultdict

import numpy as np

from deep500.utils.errors import Deep500Error, require

POOLED = "*"   # the all-kernels network


class PerKernelMLP:
    """``fit(X, y, weight, kinds)`` then ``predict(X, kinds)``: one standardised
    MLPRegressor ensemble per kind with at least ``min_samples`` rows, else the pooled
    one.

    Args:
        seed: the first network's random state (``seed + i`` for the i-th).
        hidden: the hidden layers' widths.
        alpha: L2 penalty.
        min_samples: rows a kind needs for its own networks.
        ensemble: networks averaged per kind.
    """

    def __init__(self, seed: int = 0, hidden: tuple = (32, 16), alpha: float = 1e-3,
                 min_samples: int = 8, ensemble: int = 1, max_iter: int = 200):
        if ensemble < 1:
            raise Deep500Error(f"ensemble must be at least 1 network, got {ensemble}")
        if min_samples < 2:
            raise Deep500Error(f"min_samples must be at least 2, got {min_samples}")
        self.seed, self.hidden, self.alpha = seed, tuple(hidden), alpha
        self.min_samples, self.ensemble, self.max_iter = min_samples, ensemble, max_iter
        self.networks: dict = {}

    def _train(self, X, y, weight) -> list:
        neural = require("sklearn.neural_network", "datasets", "The per-kernel MLP model")
        pipeline = require("sklearn.pipeline", "datasets", "The per-kernel MLP model")
        preprocessing = require("sklearn.preprocessing", "datasets",
                                "The per-kernel MLP model")
        exceptions = require("sklearn.exceptions", "datasets", "The per-kernel MLP model")
        networks = []
        for i in range(self.ensemble):
            model = pipeline.Pipeline([
                ("scale", preprocessing.StandardScaler()),
                ("mlp", neural.MLPRegressor(hidden_layer_sizes=self.hidden,
                                            alpha=self.alpha, max_iter=self.max_iter,
                                            solver="lbfgs", random_state=self.seed + i))])
            with warnings.catch_warnings():
                # lbfgs stopping at max_iter is the intended early stop on a few hundred
                # rows, not a failure.
                warnings.simplefilter("ignore", exceptions.ConvergenceWarning)
                networks.append(model.fit(X, y, mlp__sample_weight=weight))
        return networks

    def fit(self, X: np.ndarray, y: np.ndarray, weight: np.ndarray,
            kinds: list[str]) -> "PerKernelMLP":
        rows = defaultdict(list)
        for i, kind in enumerate(kinds):
            rows[kind].append(i)
        self.networks = {POOLED: self._train(X, y, weight)}
        for kind, index in rows.items():
            if len(index) >= self.min_samples:
                self.networks[kind] = self._train(X[index], y[index], weight[index])
        return self

    def predict(self, X: np.ndarray, kinds: list[str]) -> np.ndarray:
        if not self.networks:
            raise Deep500Error("the per-kernel MLP model is not trained: call fit first")
        result = np.empty(len(kinds))
        groups = defaultdict(list)
        for i, kind in enumerate(kinds):
            groups[kind if kind in self.networks else POOLED].append(i)
        for kind, index in groups.items():
            result[index] = np.mean([net.predict(X[index])
                                     for net in self.networks[kind]], axis=0)
        return result
