"""Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from deep500.frameworks.reference.optimizers._common import (ReferenceUpdateRule,
                                                             adaptive_step,
                                                             check_hyperparameter,
                                                             moving_average)
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv2_training.optimizer import OptimizerEvent


class AdamOptimizer(ReferenceUpdateRule):
    """Algorithm 1 of Kingma & Ba (2015), in the form of ``torch.optim.Adam``; at step
    ``t = 1, 2, ...`` (``step_count + 1``)::

        m ← β1·m + (1 − β1)·g            v ← β2·v + (1 − β2)·g²
        m̂ = m / (1 − β1^t)              v̂ = v / (1 − β2^t)
        p ← p − lr·m̂ / (√v̂ + ε)

    ``m``, ``v`` (slots ``"m"``, ``"v"``) start at 0. The step is computed as
    ``lr·√(1−β2^t)/(1−β1^t) · m / (√v + ε·√(1−β2^t))``, the same value with the bias
    corrections folded into two scalars (the paper's Section 2 remark), so that the
    arrays are traversed fewer times.
    """
    hyperparameter_names = ("learning_rate", "beta1", "beta2", "epsilon")

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, events: Sequence[OptimizerEvent] = ()):
        super().__init__(executor, loss, learning_rate, events)
        self.beta1 = check_hyperparameter(self.name, "beta1", beta1, 0.0, 1.0,
                                          high_open=True)
        self.beta2 = check_hyperparameter(self.name, "beta2", beta2, 0.0, 1.0,
                                          high_open=True)
        self.epsilon = check_hyperparameter(self.name, "epsilon", epsilon)

    def new_input(self):
        t = self.step_count + 1
        correction2 = math.sqrt(1.0 - self.beta2 ** t)
        self._step_size = self.learning_rate * correction2 / (1.0 - self.beta1 ** t)
        self._epsilon_hat = self.epsilon * correction2

    def update_rule(self, grad, old_param, param_name):
        param = self._param(old_param)
        m = self.slot(param_name, "m", param)
        v = self.slot(param_name, "v", param)
        scratch = self.scratch.like(param)
        moving_average(m, grad, self.beta1, scratch)
        moving_average(v, np.multiply(grad, grad, out=scratch), self.beta2, scratch)
        return adaptive_step(param, m, v, self._epsilon_hat, self._step_size, scratch)
