"""RMSProp (Tieleman & Hinton, "Lecture 6.5 - RMSProp: Divide the gradient by a running
average of its recent magnitude", COURSERA: Neural Networks for Machine Learning, 2012)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from deep500.frameworks.reference.optimizers._common import (ReferenceUpdateRule,
                                                             adaptive_step,
                                                             check_hyperparameter,
                                                             moving_average)
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv2_training.optimizer import OptimizerEvent


class RMSPropOptimizer(ReferenceUpdateRule):
    """RMSProp in the form of ``torch.optim.RMSprop`` (``alpha = decay``, not centered,
    no momentum)::

        r ← ρ·r + (1 − ρ)·g²        p ← p − lr·g / (√r + ε)

    ``r`` (slot ``"square_average"``) starts at 0; ε is added outside the square root
    as in PyTorch (TensorFlow adds it inside).
    """
    hyperparameter_names = ("learning_rate", "decay", "epsilon")

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 learning_rate: float = 0.01, decay: float = 0.99, epsilon: float = 1e-8,
                 events: Sequence[OptimizerEvent] = ()):
        super().__init__(executor, loss, learning_rate, events)
        self.decay = check_hyperparameter(self.name, "decay", decay, 0.0, 1.0)
        self.epsilon = check_hyperparameter(self.name, "epsilon", epsilon)

    def update_rule(self, grad, old_param, param_name):
        param = self._param(old_param)
        average = self.slot(param_name, "square_average", param)
        scratch = self.scratch.like(param)
        moving_average(average, np.multiply(grad, grad, out=scratch), self.decay, scratch)
        return adaptive_step(param, grad, average, self.epsilon, self.learning_rate, scratch)
