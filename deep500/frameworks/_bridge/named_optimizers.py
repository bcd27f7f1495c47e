"""The reference optimizers' names, hyper-parameters and defaults
(``deep500.frameworks.reference.optimizers``), for every bridge's native optimizers.

Each class here is the signature and textbook form of one algorithm; a bridge's
``AdamOptimizer`` inherits it together with its own :class:`NativeOptimizer` subclass
and names the native class (``native_class = torch.optim.Adam``) and, where they differ,
the native names of the hyper-parameters (``native_names``). The hyper-parameters reach
the native class's constructor through ``native_options``; further keyword arguments
(``native_options`` of the call) pass to it, or to the bridge's optimizer, unchanged.
"""
from __future__ import annotations

from typing import Sequence

from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv2_training.optimizer import OptimizerEvent


class NamedOptimizer:
    """Builds the bridge's optimizer over ``native_class`` with the reference-named
    hyper-parameters (mixed in before a :class:`NativeOptimizer` subclass)."""

    def _init_named(self, executor: GraphExecutor, loss: str,
                    events: Sequence[OptimizerEvent], native_options: dict,
                    **hyperparameters) -> None:
        super().__init__(executor, self.native_class, loss, events,
                         **self.native_options(**hyperparameters), **native_options)


class GradientDescent(NamedOptimizer):
    """Plain gradient descent, ``p -= learning_rate * g``."""
    hyperparameter_names = ("learning_rate",)

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 learning_rate: float = 0.1, events: Sequence[OptimizerEvent] = (),
                 **native_options):
        self._init_named(executor, loss, events, native_options, learning_rate=learning_rate)


class MomentumOptimizer(NamedOptimizer):
    """Heavy-ball momentum (Polyak 1964; Sutskever et al., ICML 2013 for Nesterov):
    ``v = momentum * v + g; p -= learning_rate * v`` (Nesterov: ``p -= learning_rate *
    (g + momentum * v)``)."""
    hyperparameter_names = ("learning_rate", "momentum", "nesterov")

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 learning_rate: float = 0.1, momentum: float = 0.9, nesterov: bool = False,
                 events: Sequence[OptimizerEvent] = (), **native_options):
        self._init_named(executor, loss, events, native_options, learning_rate=learning_rate,
                    momentum=momentum, nesterov=nesterov)


class AdamOptimizer(NamedOptimizer):
    """Adam (Kingma & Ba, ICLR 2015) with bias correction, ``epsilon`` added to
    ``sqrt(v_hat)``."""
    hyperparameter_names = ("learning_rate", "beta1", "beta2", "epsilon")

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, events: Sequence[OptimizerEvent] = (),
                 **native_options):
        self._init_named(executor, loss, events, native_options, learning_rate=learning_rate,
                    beta1=beta1, beta2=beta2, epsilon=epsilon)


class AdaGradOptimizer(NamedOptimizer):
    """AdaGrad (Duchi, Hazan & Singer, JMLR 2011): ``s += g*g; p -= learning_rate * g /
    (sqrt(s) + epsilon)``, without learning-rate decay."""
    hyperparameter_names = ("learning_rate", "initial_accumulator_value", "epsilon")

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 learning_rate: float = 0.01, initial_accumulator_value: float = 0.0,
                 epsilon: float = 1e-10, events: Sequence[OptimizerEvent] = (),
                 **native_options):
        self._init_named(executor, loss, events, native_options, learning_rate=learning_rate,
                    initial_accumulator_value=initial_accumulator_value, epsilon=epsilon)


class RMSPropOptimizer(NamedOptimizer):
    """RMSProp (Tieleman & Hinton, 2012): ``s = decay * s + (1 - decay) * g*g;
    p -= learning_rate * g / (sqrt(s) + epsilon)``."""
    hyperparameter_names = ("learning_rate", "decay", "epsilon")

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 learning_rate: float = 0.01, decay: float = 0.99, epsilon: float = 1e-8,
                 events: Sequence[OptimizerEvent] = (), **native_options):
        self._init_named(executor, loss, events, native_options, learning_rate=learning_rate,
                    decay=decay, epsilon=epsilon)


__all__ = ["AdaGradOptimizer", "AdamOptimizer", "GradientDescent", "MomentumOptimizer",
           "NamedOptimizer", "RMSPropOptimizer"]
