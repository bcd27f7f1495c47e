"""Keras optimizers behind Deep500's Level-2 :class:`Optimizer` interface.

A step is: the events' ``before_optimizer_step``; forward and backpropagation by the
TensorFlow executor (eager or ``mode="function"``), which keeps the gradients as
TensorFlow tensors in each variable's stored layout (``executor.raw_gradients``); the
events' ``modify_gradients``, only if one of them overrides it (they get NumPy
gradients in ONNX's layout, converted back to the stored layouts); the Keras
optimizer's ``apply(gradients, variables)`` on the network's ``tf.Variable``s; the
events' ``after_optimizer_step``. The update runs as a ``tf.function`` traced once
(``trace_update=True``, as Keras' own ``fit`` does), in either executor mode. With the
executor in ``mode="function"`` and no gradient modifier, the step is fused: the
executor traces the update into its forward-and-backward function
(``executor.fused_update``), one TensorFlow call per step instead of two; the
executor's outputs, gradients and events are those of an unfused step.

The named optimizers take the reference optimizers' hyper-parameter names and defaults
and pass them to ``keras.optimizers.SGD/Adam/Adagrad/RMSprop``. Keras writes some
formulas differently from the reference (and ``torch.optim``), so trajectories agree
only approximately (measured in ``tests/lv2_training/test_native_optimizers.py``):

* SGD with momentum keeps ``m = momentum*m - lr*g; p += m``: the reference's
  ``v = momentum*v + g; p -= lr*v`` scaled by ``-lr``, identical while the learning
  rate is constant, different once a schedule changes it.
* Adam adds ``epsilon`` to ``sqrt(v)`` before bias correction, i.e. the reference's
  ``epsilon`` becomes ``epsilon / sqrt(1 - beta2**t)`` (31.6x larger at step 1).
* AdaGrad and RMSProp add ``epsilon`` under the square root: ``g / sqrt(s + epsilon)``
  where the reference divides by ``sqrt(s) + epsilon``.

``learning_rate`` reads and writes the Keras optimizer's learning-rate variable (the
traced update reads it, so schedules need no retracing); other hyper-parameters are
Python constants in Keras, so setting one retraces the update. Checkpoints
(``state_dict``) hold NumPy arrays: each parameter's Keras slots (in ONNX's layout) and
the optimizer's own variables (iteration count, learning rate).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from deep500.frameworks._bridge import named_optimizers as named
from deep500.frameworks._bridge.native_optimizer import NativeHyperparameter, NativeOptimizer
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.executor import _TensorFlowExecutorBase
from deep500.frameworks.tensorflow.network import TensorFlowNetwork
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv1_network.network import gradient_name
from deep500.lv2_training.optimizer import OptimizerEvent, modifies_gradients
from deep500.utils.errors import Deep500Error, require

keras = require("keras", "tensorflow", "Keras optimizers (deep500.frameworks.tensorflow)")


def _value(value):
    """A Keras variable, tensor or number as a Python scalar or NumPy array."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    value = np.asarray(value)
    return value.item() if value.ndim == 0 else value


class _KerasHyperparameter(NativeHyperparameter):
    """A hyper-parameter stored as a Python attribute of the Keras optimizer; the
    traced update bakes it in, so setting it retraces."""

    def read(self, optimizer):
        return getattr(optimizer.native_optimizer, self.native_name)

    def write(self, optimizer, value) -> None:
        if getattr(optimizer.native_optimizer, self.native_name) != value:
            setattr(optimizer.native_optimizer, self.native_name, value)
            optimizer._traced_update = None


class KerasOptimizer(NativeOptimizer):
    """Any Keras optimizer, training the network of a TensorFlow executor.

    Args:
        executor: a TensorFlow executor (``d5tf.from_onnx(model, mode=...)`` or a
            ``TensorFlowNativeGraphExecutor``).
        optimizer: a ``keras.optimizers.Optimizer`` subclass (instantiated here with
            ``kwargs``) or an instance that has not been built yet (it is built over
            the network's trainable variables here).
        loss: the scalar network output to minimise.
        events: :class:`OptimizerEvent` objects called around each step.
        trace_update: apply the update in a ``tf.function`` traced once (default);
            False calls Keras eagerly (milliseconds per step; for debugging).

    Attributes:
        keras_optimizer: the Keras optimizer.
        learning_rate: the Keras optimizer's learning rate.
    """
    bridge, wraps, trains = "d5tf", "a Keras optimizer", "a TensorFlow executor"
    executor_types = (_TensorFlowExecutorBase,)
    native_base = keras.optimizers.Optimizer
    native_kind = "keras.optimizers.Optimizer class or instance (e.g. keras.optimizers.Adam)"
    hyperparameter = _KerasHyperparameter

    def __init__(self, executor: GraphExecutor, optimizer, loss: str = "loss",
                 events: Sequence[OptimizerEvent] = (), trace_update: bool = True,
                 **kwargs):
        super().__init__(executor, optimizer, loss, events, **kwargs)
        self.trace_update = bool(trace_update)
        self._traced_update = None
        network = self.network
        if isinstance(network, TensorFlowNetwork):
            network.plan   # building the plan may move parameters to other layouts
        self._names = network.get_params()
        self._variables = [network.variables[n] for n in self._names]
        self._version = getattr(network, "version", 0)
        self._slots = self._build()

    @property
    def keras_optimizer(self):
        """The ``keras.optimizers.Optimizer`` taking the steps."""
        return self.native_optimizer

    def _instantiate(self, optimizer_class: type, kwargs: dict):
        return optimizer_class(**kwargs)

    def _check_instance(self, optimizer) -> None:
        if optimizer.built:
            raise Deep500Error(f"{self.name}: the given {type(optimizer).__name__} was "
                               f"already built over other variables; pass the class "
                               f"or a new instance")

    def _build(self) -> dict:
        """Builds the Keras optimizer over the variables, noting which slot variable
        (momentum, velocity, ...) belongs to which parameter."""
        optimizer = self.keras_optimizer
        owner = {id(v): name for name, v in zip(self._names, self._variables)}
        slots: dict[str, dict] = {}
        create = optimizer.add_variable_from_reference

        def recording(reference_variable, name=None, initializer="zeros"):
            variable = create(reference_variable, name=name, initializer=initializer)
            parameter = owner.get(id(reference_variable))
            if parameter is not None:
                slots.setdefault(parameter, {})[name or "var"] = variable
            return variable

        optimizer.add_variable_from_reference = recording
        try:
            with self.executor._scope():
                optimizer.build(self._variables)
        finally:
            del optimizer.add_variable_from_reference
        return slots

    def rebuild(self) -> None:
        """Replace the Keras optimizer by a new one of the same class and configuration,
        built over the network's current parameters; its slots start at zero. For
        parameters that were replaced as a whole, e.g. by a ``tf.distribute``
        strategy's mirrored variables: call it in the strategy's scope, which a Keras
        optimizer takes as its own when it is created."""
        old = self.keras_optimizer
        self.native_optimizer = type(old).from_config(old.get_config())
        network = self.network
        self._names = network.get_params()
        self._variables = [network.variables[n] for n in self._names]
        self._version = getattr(network, "version", 0)
        self._traced_update = None
        self._slots = self._build()

    # -- hyper-parameters --------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        return float(_value(self.keras_optimizer.learning_rate))

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        try:
            self.keras_optimizer.learning_rate = float(value)
        except TypeError as exc:   # a LearningRateSchedule cannot be overwritten
            raise Deep500Error(f"{self.name}: cannot set the learning rate: {exc}") from None

    # -- training ----------------------------------------------------------------------
    def step(self, inputs: dict) -> dict:
        self._before_step(inputs)
        executor = self.executor
        if getattr(self.network, "version", 0) != self._version:
            self._check_variables()
        modifiers = bool(self.events) and any(modifies_gradients(e) for e in self.events)
        if self.fused and not modifiers:
            executor.fused_update = self._update_function()
            try:
                outputs = executor.inference_and_backprop(inputs, self.loss)
            finally:
                executor.fused_update = None
            self._check_loss(outputs)
        else:
            outputs = executor.inference_and_backprop(inputs, self.loss)
            self._check_loss(outputs)
            gradients = executor.raw_gradients
            if modifiers:
                gradients = self._modified_gradients(outputs, gradients)
            with executor._scope():
                self._apply(gradients)
        self.step_count += 1
        self._after_step(inputs, outputs)
        return outputs

    @property
    def fused(self) -> bool:
        """Whether steps without gradient modifiers run forward, backpropagation and
        the update as one traced function (executor mode "function", traced update).
        A fused step checks the loss after the update: a non-finite loss still stops
        training with an error, but that step's update has been applied already."""
        return self.trace_update and getattr(self.executor, "mode", None) == "function"

    def _update_function(self):
        """The update as a ``tf.function`` of the list of gradients, traced once (and
        again after a hyper-parameter that Keras keeps as a constant changed)."""
        update = self._traced_update
        if update is None:
            optimizer, variables = self.keras_optimizer, self._variables

            def update(gradients):
                optimizer.apply(list(gradients), variables)

            update = self._traced_update = tf.function(update)
        return update

    def _apply(self, gradients: list) -> None:
        if self.trace_update:
            self._update_function()(list(gradients))
        else:
            self.keras_optimizer.apply(list(gradients), self._variables)

    def _modified_gradients(self, outputs: dict, raw: list) -> list:
        """The gradient modifiers' result, as tensors in the stored layouts."""
        gradients = {name: outputs[gradient_name(name)] for name in self._names}
        self._modify_gradients(gradients)
        layouts = getattr(self.network, "layouts", {})
        result = []
        for name, tensor in zip(self._names, raw):
            value = np.asarray(gradients[name], dtype=tensor.dtype.as_numpy_dtype)
            layout = layouts.get(name)
            expected = layout.shape if layout is not None else tuple(tensor.shape)
            if value.shape != tuple(expected):
                raise Deep500Error(f"{self.name}: a gradient modifier returned shape "
                                   f"{value.shape} for parameter {name!r} of shape "
                                   f"{tuple(expected)}")
            if layout is not None:
                value = layout.to_stored(value)
            result.append(tf.convert_to_tensor(value))
        return result

    def _check_variables(self) -> None:
        """After a graph edit: the Keras optimizer's slots belong to the variables it
        was built over, so those must still be the network's parameters."""
        network = self.network
        if isinstance(network, TensorFlowNetwork):
            network.plan   # builds the plan, which may move parameters to new layouts
        names = network.get_params()
        if names != self._names or any(network.variables[n] is not v
                                       for n, v in zip(names, self._variables)):
            raise Deep500Error(f"{self.name}: the parameters of network '{network.name}' "
                               f"changed after the Keras optimizer was built over them "
                               f"(a graph edit re-created variables); create the optimizer "
                               f"after editing the graph")
        self._version = getattr(network, "version", 0)

    # -- state -------------------------------------------------------------------------
    def _own_variables(self) -> dict:
        """The Keras optimizer's variables that are not per-parameter slots
        (iteration count, learning rate), by name."""
        slot_ids = {id(v) for slots in self._slots.values() for v in slots.values()}
        return {v.name: v for v in self.keras_optimizer.variables if id(v) not in slot_ids}

    def _native_state(self) -> dict:
        """A copy of the Keras slots, in ONNX's layout."""
        to_onnx = getattr(self.network, "to_onnx", lambda name, value: value)
        return {name: {slot: np.array(to_onnx(name, np.asarray(v.numpy())), copy=True)
                       for slot, v in slots.items()}
                for name, slots in self._slots.items()}

    def state_dict(self) -> dict:
        return {"optimizer": self.name, "step_count": self.step_count,
                "hyperparameters": self.hyperparameters(), "state": self.state,
                "optimizer_variables": {n: np.array(v.numpy(), copy=True)
                                        for n, v in self._own_variables().items()}}

    def load_state_dict(self, state: dict) -> None:
        self._check_state_owner(state)
        layouts = getattr(self.network, "layouts", {})
        for name, slots in state.get("state", {}).items():
            if name not in self._slots:
                raise Deep500Error(f"{self.name}: the state holds parameter {name!r}, "
                                   f"which this optimizer does not train")
            for slot, value in slots.items():
                if slot not in self._slots[name]:
                    raise Deep500Error(f"{self.name}: parameter {name!r} has no Keras slot "
                                       f"{slot!r} (slots: {sorted(self._slots[name])})")
                layout = layouts.get(name)
                self._slots[name][slot].assign(layout.to_stored(np.asarray(value))
                                               if layout is not None else value)
        own = self._own_variables()
        for name, value in state.get("optimizer_variables", {}).items():
            if name in own:
                own[name].assign(value)
        for name, value in state.get("hyperparameters", {}).items():
            setattr(self, name, value)
        self.step_count = int(state["step_count"])


# -- the reference optimizers' names and defaults on keras.optimizers ----------------
class GradientDescent(named.GradientDescent, KerasOptimizer):
    """Plain gradient descent on ``keras.optimizers.SGD`` (momentum 0)."""
    native_class = keras.optimizers.SGD


class MomentumOptimizer(named.MomentumOptimizer, KerasOptimizer):
    """Momentum SGD on ``keras.optimizers.SGD``: ``m = momentum*m - lr*g; p += m``
    (Nesterov: ``p += momentum*m - lr*g``); the reference's heavy ball while the
    learning rate is constant (see the module docstring)."""
    native_class = keras.optimizers.SGD


class AdamOptimizer(named.AdamOptimizer, KerasOptimizer):
    """Adam on ``keras.optimizers.Adam``; Keras adds ``epsilon`` before bias correction
    (see the module docstring)."""
    native_class = keras.optimizers.Adam
    native_names = {"beta1": "beta_1", "beta2": "beta_2"}


class AdaGradOptimizer(named.AdaGradOptimizer, KerasOptimizer):
    """AdaGrad on ``keras.optimizers.Adagrad``: ``s += g*g; p -= lr * g /
    sqrt(s + epsilon)``."""
    native_class = keras.optimizers.Adagrad


class RMSPropOptimizer(named.RMSPropOptimizer, KerasOptimizer):
    """RMSProp on ``keras.optimizers.RMSprop`` with ``rho=decay``: ``s = decay*s +
    (1 - decay)*g*g; p -= lr * g / sqrt(s + epsilon)``."""
    native_class = keras.optimizers.RMSprop
    native_names = {"decay": "rho"}


__all__ = ["AdaGradOptimizer", "AdamOptimizer", "GradientDescent", "KerasOptimizer",
           "MomentumOptimizer", "RMSPropOptimizer"]
