"""AdaGrad (Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and
Stochastic Optimization", JMLR 12, 2011)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from deep500.frameworks.reference.optimizers._common import (ReferenceUpdateRule,
                                                             adaptive_step,
                                                             check_hyperparameter)
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv2_training.optimizer import OptimizerEvent


class AdaGradOptimizer(ReferenceUpdateRule):
    """Diagonal AdaGrad in the form of ``torch.optim.Adagrad`` (no learning-rate decay;
    schedules do that)::

        s ← s + g²                 p ← p − lr·g / (√s + ε)

    ``s`` (slot ``"sum"``) starts at ``initial_accumulator_value``.
    """
    hyperparameter_names = ("learning_rate", "initial_accumulator_value", "epsilon")

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 learning_rate: float = 0.01, initial_accumulator_value: float = 0.0,
                 epsilon: float = 1e-10, events: Sequence[OptimizerEvent] = ()):
        super().__init__(executor, loss, learning_rate, events)
        self.initial_accumulator_value = check_hyperparameter(
            self.name, "initial_accumulator_value", initial_accumulator_value)
        self.epsilon = check_hyperparameter(self.name, "epsilon", epsilon)

    def update_rule(self, grad, old_param, param_name):
        param = self._param(old_param)
        accumulator = self.slot(param_name, "sum", param, self.initial_accumulator_value)
        squares = self.scratch.like(param)
        accumulator += np.multiply(grad, grad, out=squares)
        return adaptive_step(param, grad, accumulator, self.epsilon, self.learning_rate,
                             squares)
