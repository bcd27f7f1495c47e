"""``torch.optim`` optimizers behind Deep500's Level-2 :class:`Optimizer` interface.

A step is: the events' ``before_optimizer_step``; forward and backpropagation by the
PyTorch executor, which leaves every parameter's gradient in its ``.grad``; the events'
``modify_gradients``, only if one of them overrides it (they get NumPy gradients; what
they change is copied back into ``.grad``); ``torch_optimizer.step()``; the events'
``after_optimizer_step``. Without gradient modifiers or executor events nothing is
converted: the update is torch's own, on torch's tensors, and the step returns the
network's outputs without the gradients (``network.fetch_tensor`` reads them).

So the same training loop, sampler and events drive the reference optimizers of
``deep500.frameworks.reference.optimizers`` and these, and
:func:`deep500.lv2_training.trajectory.trajectory_divergence` can compare the two.
The named optimizers take the reference optimizers' hyper-parameter names and
defaults; each is mapped onto torch's (e.g. ``beta1``/``beta2`` onto ``betas``), and
each is an attribute that reads and writes torch's parameter groups, so a schedule that
sets ``optimizer.learning_rate`` changes the step torch takes.

Checkpoints (``state_dict``) are framework-neutral: torch's per-parameter state keyed by
the parameters' ONNX names, with tensors as NumPy arrays.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from deep500.frameworks._bridge import named_optimizers as named
from deep500.frameworks._bridge.native_optimizer import NativeHyperparameter, NativeOptimizer
from deep500.frameworks.pytorch.executor import _TorchExecutor
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv1_network.network import gradient_name
from deep500.lv2_training.optimizer import OptimizerEvent, modifies_gradients
from deep500.utils.errors import Deep500Error, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


class _GroupHyperparameter(NativeHyperparameter):
    """A hyper-parameter that lives in torch's parameter groups: read from the first
    group, written to all (a native name ``(key, index)`` is an element of a tuple such
    as ``betas``)."""

    def _key_index(self) -> tuple[str, int | None]:
        native = self.native_name
        return native if isinstance(native, tuple) else (native, None)

    def read(self, optimizer):
        key, index = self._key_index()
        value = optimizer.native_optimizer.param_groups[0][key]
        if index is not None:
            value = value[index]
        return value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 \
            else value

    def write(self, optimizer, value) -> None:
        key, index = self._key_index()
        for group in optimizer.native_optimizer.param_groups:
            if index is None:
                group[key] = value
            else:
                values = list(group[key])
                values[index] = value
                group[key] = tuple(values)


def _to_numpy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    return value


def _from_numpy(value):
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value, copy=True))
    return value


class TorchOptimizer(NativeOptimizer):
    """Any ``torch.optim`` optimizer, training the network of a PyTorch executor.

    Args:
        executor: a PyTorch executor (``d5pt.from_onnx(model)`` or a
            ``PyTorchNativeGraphExecutor``).
        optimizer: a ``torch.optim.Optimizer`` subclass, instantiated here over all of
            the network's parameters with ``kwargs``; or an instance already built over
            (some of) the network's parameters, e.g. with per-layer parameter groups.
        loss: the scalar network output to minimise.
        events: :class:`OptimizerEvent` objects called around each step.

    Attributes:
        torch_optimizer: the ``torch.optim.Optimizer``.
        learning_rate: torch's ``lr`` (read from the first parameter group, set in all).

    A parameter that the loss does not reach has no ``.grad`` and torch skips it (the
    reference optimizers update it with a zero gradient instead; momentum then still
    moves it).
    """
    bridge, wraps, trains = "d5pt", "torch.optim", "a PyTorch executor"
    executor_types = (_TorchExecutor,)
    native_base = torch.optim.Optimizer
    native_kind = "torch.optim.Optimizer class or instance (e.g. torch.optim.Adam)"
    hyperparameter = _GroupHyperparameter
    native_names = {"learning_rate": "lr", "epsilon": "eps"}

    def __init__(self, executor: GraphExecutor, optimizer, loss: str = "loss",
                 events: Sequence[OptimizerEvent] = (), **kwargs):
        super().__init__(executor, optimizer, loss, events, **kwargs)
        self._names = {id(p): name for name, p in self.network.parameter_values.items()}

    @property
    def torch_optimizer(self):
        """The ``torch.optim.Optimizer`` taking the steps."""
        return self.native_optimizer

    def _instantiate(self, optimizer_class: type, kwargs: dict):
        return optimizer_class(list(self.network.parameter_values.values()), **kwargs)

    def _check_instance(self, optimizer) -> None:
        known = {id(p) for p in self.network.parameter_values.values()}
        foreign = sum(1 for group in optimizer.param_groups for p in group["params"]
                      if id(p) not in known)
        if foreign:
            raise Deep500Error(f"{self.name}: the given {type(optimizer).__name__} "
                               f"holds {foreign} tensor(s) that are not parameters of "
                               f"network '{self.network.name}'; build it over "
                               f"executor.network.parameter_values.values()")

    # -- training ------------------------------------------------------------------
    def step(self, inputs: dict) -> dict:
        """One step on the minibatch ``inputs``; returns the network's outputs as NumPy
        arrays. The gradients are added (keyed ``gradient_name(parameter)``) only when
        something reads them: an executor event (``after_backprop``) or a gradient
        modifier. Otherwise they stay in torch's ``.grad``, where the update reads them,
        and ``network.fetch_tensor(gradient_name(p))`` returns one as an array."""
        events = self.events   # tested before each call: see _TorchExecutor._to_tensor
        if events:
            self._before_step(inputs)
        executor = self.executor
        modifiers = bool(events) and any(modifies_gradients(e) for e in events)
        if modifiers or executor.events:
            outputs = executor.inference_and_backprop(inputs, self.loss)
        else:
            executor._check_inputs(inputs)
            outputs = executor._backprop(inputs, self.loss)
        self._check_loss(outputs)
        if modifiers:
            self._modify_torch_gradients(outputs)
        self.torch_optimizer.step()
        self.step_count += 1
        if events:
            self._after_step(inputs, outputs)
        return outputs

    def _modify_torch_gradients(self, outputs: dict) -> None:
        """Runs the gradient modifiers on NumPy gradients and puts the result in
        ``.grad``. On the CPU the executor's arrays share memory with ``.grad``, so
        in-place changes need no copy."""
        parameters = self.network.parameter_values
        original = {name: outputs[gradient_name(name)] for name in parameters}
        gradients = dict(original)
        self._modify_gradients(gradients)
        for name, parameter in parameters.items():
            grad, value = parameter.grad, gradients[name]
            if grad is not None and value is original[name] and grad.device.type == "cpu":
                continue
            array = np.asarray(value)
            if grad is None:
                if not np.any(array):
                    continue    # still no gradient: torch skips the parameter
                parameter.grad = torch.from_numpy(np.array(
                    array, dtype=_numpy_dtype(parameter))).to(parameter.device)
            else:
                if array.shape != tuple(grad.shape):
                    raise Deep500Error(f"{self.name}: a gradient modifier returned shape "
                                       f"{array.shape} for parameter {name!r} of shape "
                                       f"{tuple(grad.shape)}")
                grad.copy_(torch.from_numpy(np.require(array, requirements="C")))

    # -- state ---------------------------------------------------------------------
    def _ordered_names(self) -> list[str]:
        """Parameter names in the order of torch's state-dict indices."""
        try:
            return [self._names[id(p)] for group in self.torch_optimizer.param_groups
                    for p in group["params"]]
        except KeyError:
            raise Deep500Error(f"{self.name}: the torch optimizer now holds tensors that "
                               f"are not parameters of network '{self.network.name}'"
                               ) from None

    def _native_state(self) -> dict:
        return self.state_dict()["state"]

    def _forget_native_state(self) -> None:
        self.torch_optimizer.state = defaultdict(dict)

    def state_dict(self) -> dict:
        """Step count, hyper-parameters, torch's parameter groups (with parameter names
        for indices) and per-parameter state, tensors as NumPy arrays."""
        names = self._ordered_names()
        torch_state = self.torch_optimizer.state_dict()
        state = {names[index]: {slot: _to_numpy(v) for slot, v in slots.items()}
                 for index, slots in torch_state["state"].items()}
        groups = [{**{k: _to_numpy(v) for k, v in group.items() if k != "params"},
                   "params": [names[i] for i in group["params"]]}
                  for group in torch_state["param_groups"]]
        return {"optimizer": self.name, "step_count": self.step_count,
                "hyperparameters": self.hyperparameters(), "param_groups": groups,
                "state": state}

    def load_state_dict(self, state: dict) -> None:
        self._check_state_owner(state)
        if "param_groups" not in state:
            raise Deep500Error(f"{self.name}: the state has no 'param_groups'; it was not "
                               f"written by a d5pt optimizer's state_dict()")
        index = {name: i for i, name in enumerate(self._ordered_names())}
        unknown = sorted({n for g in state["param_groups"] for n in g["params"]} - set(index))
        if unknown:
            raise Deep500Error(f"{self.name}: the state holds parameters {unknown[:5]} "
                               f"that this optimizer does not train (network "
                               f"'{self.network.name}')")
        groups = [{**{k: _from_numpy(v) if k != "betas" else tuple(v)
                      for k, v in g.items() if k != "params"},
                   "params": [index[n] for n in g["params"]]} for g in state["param_groups"]]
        # torch keeps the "step" counters as given (float32 tensors) and casts the other
        # slots to each parameter's dtype and device.
        slots = {index[name]: {slot: _from_numpy(v) for slot, v in values.items()}
                 for name, values in state.get("state", {}).items()}
        try:
            self.torch_optimizer.load_state_dict({"state": slots, "param_groups": groups})
        except (ValueError, KeyError) as exc:
            raise Deep500Error(f"{self.name}: torch refused the saved state: {exc}") from None
        self.step_count = int(state["step_count"])


def _numpy_dtype(tensor) -> np.dtype:
    return torch.empty((), dtype=tensor.dtype).numpy().dtype


# -- the reference optimizers' names and defaults on torch.optim ---------------------
class GradientDescent(named.GradientDescent, TorchOptimizer):
    """Plain gradient descent on ``torch.optim.SGD``."""
    native_class = torch.optim.SGD


class MomentumOptimizer(named.MomentumOptimizer, TorchOptimizer):
    """Heavy-ball momentum on ``torch.optim.SGD`` with dampening 0."""
    native_class = torch.optim.SGD


class AdamOptimizer(named.AdamOptimizer, TorchOptimizer):
    """Adam on ``torch.optim.Adam`` with ``betas=(beta1, beta2)``, ``eps=epsilon``."""
    native_class = torch.optim.Adam
    native_names = {"beta1": ("betas", 0), "beta2": ("betas", 1)}


class AdaGradOptimizer(named.AdaGradOptimizer, TorchOptimizer):
    """AdaGrad on ``torch.optim.Adagrad`` without learning-rate decay."""
    native_class = torch.optim.Adagrad


class RMSPropOptimizer(named.RMSPropOptimizer, TorchOptimizer):
    """RMSProp on ``torch.optim.RMSprop`` with ``alpha=decay``."""
    native_class = torch.optim.RMSprop
    native_names = {"decay": "alpha"}


__all__ = ["AdaGradOptimizer", "AdamOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer", "TorchOptimizer"]
