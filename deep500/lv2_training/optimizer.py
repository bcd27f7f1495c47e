"""The Level-2 optimizer interfaces: an optimizer trains the network of any Level-1
:class:`GraphExecutor` (reference, PyTorch, TensorFlow), one minibatch per ``step``.

Three interfaces, from the Deep500 paper (Ben-Nun et al., IPDPS 2019, Section IV-C):

* :class:`Optimizer`: ``step(inputs)`` does whatever one training step needs. Framework-
  native optimizers (``torch.optim``, Keras) implement this directly.
* :class:`ThreeStepOptimizer`: a step is (1) ``new_input()``, once per minibatch;
  (2) ``prepare_param(name)`` for every parameter, before the gradient is computed (e.g.
  AcceleGrad moves the parameters to the point where its gradient is evaluated);
  (3) after forward and backpropagation, ``update_rule(grad, old_param, name)`` for
  every parameter, returning its new value. Distributed schemes (Level 3) wrap this
  protocol: they can reach between the steps (e.g. average gradients before step 3).
* :class:`UpdateRuleOptimizer`: a three-step optimizer with only step 3, as short to
  write as an update rule in a paper's pseudo-code.

Per-parameter state (momentum buffers, moments) lives in ``self.state[param][slot]`` as
NumPy arrays, so :meth:`Optimizer.state_dict` can checkpoint any optimizer written this
way. Hyper-parameters that schedules may change (``learning_rate``) are plain attributes.

Events (:class:`OptimizerEvent`) run around each step; a gradient modifier (weight
decay, clipping) is an event whose ``modify_gradients`` changes the gradients between
backpropagation and the update.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv1_network.network import gradient_name
from deep500.utils.errors import Deep500Error


class OptimizerEvent:
    """Hooks around one optimizer step; subclasses override what they need."""

    def before_optimizer_step(self, optimizer: "Optimizer", inputs: dict) -> None:
        """Before the step (e.g. set ``optimizer.learning_rate`` from a schedule)."""

    def modify_gradients(self, optimizer: "Optimizer", gradients: dict) -> None:
        """Between backpropagation and the update: change ``gradients``
        (``{parameter name: ndarray}``) in place or by assigning new arrays."""

    def after_optimizer_step(self, optimizer: "Optimizer", inputs: dict,
                             outputs: dict) -> None:
        """After the parameters were updated; ``outputs`` are the executor's."""


def modifies_gradients(event) -> bool:
    """Whether ``event`` overrides :meth:`OptimizerEvent.modify_gradients` (optimizers
    that keep gradients in a framework skip the NumPy round trip when none does)."""
    method = getattr(type(event), "modify_gradients", None)
    return method is not None and method is not OptimizerEvent.modify_gradients


class Optimizer:
    """Trains ``executor.network`` by minimising the scalar output ``loss``.

    Attributes:
        executor: the Level-1 executor that runs forward and backpropagation.
        network: ``executor.network``.
        loss: name of the scalar network output to minimise.
        events: :class:`OptimizerEvent` objects called around every step.
        step_count: steps taken so far (restored from checkpoints).
        learning_rate: the step size, where the optimizer has one; schedules set it.
        state: ``{parameter: {slot: ndarray}}``, per-parameter optimizer state.
    """
    #: Hyper-parameters saved with the state and shown in reports.
    hyperparameter_names: tuple[str, ...] = ("learning_rate",)

    def __init__(self, executor: GraphExecutor, loss: str = "loss",
                 events: Sequence[OptimizerEvent] = ()):
        if not isinstance(executor, GraphExecutor):
            raise Deep500Error(f"{type(self).__name__} needs a Level-1 GraphExecutor (e.g. "
                               f"d5ref.from_onnx(model)), got {type(executor).__name__}")
        if not executor.supports_backprop:
            raise Deep500Error(f"{type(self).__name__} cannot train with the "
                               f"{executor.framework} executor: it runs inference only")
        self.executor = executor
        self.network = executor.network
        self.loss = loss
        self.events = list(events)
        self.step_count = 0
        self.state: dict[str, dict[str, np.ndarray]] = {}

    @property
    def name(self) -> str:
        return type(self).__name__

    def hyperparameters(self) -> dict:
        """``{name: value}`` of the hyper-parameters (for reports and checkpoints)."""
        return {n: getattr(self, n) for n in self.hyperparameter_names if hasattr(self, n)}

    # -- training ------------------------------------------------------------------
    def step(self, inputs: dict) -> dict:
        """One training step on the minibatch ``inputs`` (``{tensor name: array}``);
        returns the network's outputs (including the loss), and the gradients (keyed
        ``gradient_name(parameter)``) where the optimizer has them as arrays anyway.
        ``network.fetch_tensor(gradient_name(p))`` reads any optimizer's gradients."""
        raise NotImplementedError

    def train(self, sampler: Iterable[dict], steps: int | None = None) -> list[float]:
        """Steps over ``sampler`` (one epoch of a Sampler, or any iterable of
        minibatches) until it ends or ``steps`` were taken; returns the losses."""
        losses = []
        for batch in sampler:
            if steps is not None and len(losses) >= steps:
                break
            outputs = self.step(batch)
            losses.append(float(np.asarray(outputs[self.loss])))
        return losses

    #: Whether every process must stop training at the same point (distributed
    #: optimizers, whose steps communicate). The trainer then defers a StopTraining
    #: raised by an event to the end of the epoch, where the processes agree on it
    #: with :meth:`agree_to_stop`.
    stops_together = False

    def agree_to_stop(self, reason: str | None) -> str | None:
        """Given this process's reason to stop (``None``: none), the reason all
        processes stop for, or ``None`` if none wants to; collective where
        ``stops_together``. Alone, a process decides for itself."""
        return reason

    def end_epoch(self) -> dict:
        """Called by the trainer on every rank after an epoch's last step, before the
        validation pass. Optimizers that communicate finish outstanding work here
        (e.g. an asynchronous parameter server answers its last requests) and return
        what they measured over the epoch (``EpochStatistics.optimizer_measurements``);
        the default does nothing and returns ``{}``."""
        return {}

    # -- checkpoints ---------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue this optimizer's trajectory
        exactly: step count, hyper-parameters and per-parameter state (copies)."""
        return {"optimizer": self.name, "step_count": self.step_count,
                "hyperparameters": self.hyperparameters(),
                "state": {p: {s: np.array(v, copy=True) for s, v in slots.items()}
                          for p, slots in self.state.items()}}

    def load_state_dict(self, state: dict) -> None:
        if state.get("optimizer") != self.name:
            raise Deep500Error(f"Cannot load the state of a {state.get('optimizer')} into "
                               f"a {self.name}")
        self.step_count = int(state["step_count"])
        for name, value in state.get("hyperparameters", {}).items():
            setattr(self, name, value)
        self.state = {p: {s: np.array(v, copy=True) for s, v in slots.items()}
                      for p, slots in state.get("state", {}).items()}

    # -- events --------------------------------------------------------------------
    def _before_step(self, inputs: dict) -> None:
        for event in self.events:
            event.before_optimizer_step(self, inputs)

    def _modify_gradients(self, gradients: dict) -> None:
        for event in self.events:
            event.modify_gradients(self, gradients)

    def _after_step(self, inputs: dict, outputs: dict) -> None:
        for event in self.events:
            event.after_optimizer_step(self, inputs, outputs)

    def _check_loss(self, outputs: dict) -> None:
        loss = outputs[self.loss]
        try:   # a scalar: math.isfinite costs far less than NumPy's ufuncs
            finite = math.isfinite(loss)
        except TypeError:
            finite = bool(np.all(np.isfinite(np.asarray(loss))))
        if not finite:
            raise Deep500Error(f"{self.name}: the loss {self.loss!r} became {loss} at step "
                               f"{self.step_count}; lower the learning rate or check the "
                               f"inputs")


class ThreeStepOptimizer(Optimizer):
    """An optimizer written as ``new_input``, ``prepare_param`` and ``update_rule``
    (see the module docstring). The base class runs the steps over any executor:
    parameters and gradients travel as NumPy arrays through ``network.fetch_tensor``
    and ``network.feed_tensor``."""

    def new_input(self) -> None:
        """Step 1: once per minibatch, before anything else."""

    def prepare_param(self, param_name: str) -> None:
        """Step 2: for each parameter, before forward and backpropagation."""

    def update_rule(self, grad: np.ndarray, old_param: np.ndarray,
                    param_name: str) -> np.ndarray:
        """Step 3: the new value of parameter ``param_name``."""
        raise NotImplementedError

    # -- the step, in parts that distributed optimizers reuse --------------------------
    def parameters(self) -> list[str]:
        return self.network.get_params()

    def compute_gradients(self, inputs: dict) -> tuple[dict, dict]:
        """Steps 1 and 2, forward and backpropagation; returns the executor's outputs
        and ``{parameter: gradient}`` (after the gradient modifiers)."""
        self.new_input()
        parameters = self.parameters()
        for name in parameters:
            self.prepare_param(name)
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        self._check_loss(outputs)
        gradients = {}
        for name in parameters:
            grad = outputs.get(gradient_name(name))
            gradients[name] = grad if grad is not None else self.network.fetch_tensor(
                gradient_name(name))
        self._modify_gradients(gradients)
        return outputs, gradients

    def apply_gradients(self, gradients: dict) -> None:
        """Step 3 for every parameter in ``gradients``."""
        network = self.network
        for name, grad in gradients.items():
            old = network.fetch_tensor(name)
            new = self.update_rule(grad, old, name)
            network.feed_tensor(name, new, is_param=True)

    def step(self, inputs: dict) -> dict:
        self._before_step(inputs)
        outputs, gradients = self.compute_gradients(inputs)
        self.apply_gradients(gradients)
        self.step_count += 1
        self._after_step(inputs, outputs)
        return outputs

    # -- per-parameter state ---------------------------------------------------------
    def slot(self, param_name: str, slot: str, like: np.ndarray,
             initial: float = 0.0) -> np.ndarray:
        """The state array ``slot`` of a parameter, created as ``initial`` (with the
        parameter's shape and dtype) the first time it is asked for."""
        slots = self.state.setdefault(param_name, {})
        value = slots.get(slot)
        if value is None:
            value = slots[slot] = np.full(np.shape(like), initial,
                                          dtype=np.asarray(like).dtype)
        return value


class UpdateRuleOptimizer(ThreeStepOptimizer):
    """An optimizer given by its update rule alone: implement ``update_rule(grad,
    old_param, param_name)``, returning the new parameter value."""

