"""A framework's own optimizer (``torch.optim``, Keras) behind Deep500's Level-2
:class:`~deep500.lv2_training.optimizer.Optimizer` interface: the bookkeeping every bridge
needs alike, written once, as a base class owns it in tinygrad's ``nn/optim.py``.

The base checks that the executor is the bridge's, takes the native optimizer as a class
(instantiated here) or an instance (checked here), names itself after it, maps the
reference optimizers' hyper-parameter names onto the native ones (``native_names``), and
refuses a checkpoint of another optimizer. A bridge's optimizer class supplies what
differs: the executor and native types, how a native instance is built over the
network's parameters, how a hyper-parameter is read and written (a
:class:`NativeHyperparameter`), the step and the state.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv2_training.optimizer import Optimizer, OptimizerEvent
from deep500.utils.errors import Deep500Error


class NativeHyperparameter:
    """A hyper-parameter that lives in the native optimizer (``optimizer.native_optimizer``):
    a subclass says how to :meth:`read` and :meth:`write` it. NumPy scalars are written as
    Python numbers."""

    def __init__(self, native_name: str | tuple[str, int]):
        self.native_name = native_name

    def __get__(self, optimizer, owner=None):
        if optimizer is None:
            return self
        return self.read(optimizer)

    def __set__(self, optimizer, value) -> None:
        if isinstance(value, np.generic):
            value = value.item()
        self.write(optimizer, value)

    def read(self, optimizer):
        raise NotImplementedError

    def write(self, optimizer, value) -> None:
        raise NotImplementedError


class NativeOptimizer(Optimizer):
    """A native optimizer training the network of the bridge's executor.

    Args:
        executor: an executor of the bridge (``executor_types``).
        optimizer: a ``native_base`` subclass, instantiated here with ``kwargs`` (see
            :meth:`_instantiate`); or an instance, checked by :meth:`_check_instance`.
        loss: the scalar network output to minimise.
        events: :class:`OptimizerEvent` objects called around each step.

    Attributes:
        native_optimizer: the native optimizer.

    A bridge's optimizer class sets ``bridge`` ("d5pt"), ``wraps`` ("torch.optim"),
    ``trains`` ("a PyTorch executor"), ``executor_types``, ``native_base`` and its
    description in errors (``native_kind``: "torch.optim.Optimizer class or instance
    (e.g. torch.optim.Adam)"), and ``hyperparameter`` (a :class:`NativeHyperparameter`
    subclass). A named optimizer (``AdamOptimizer``) sets
    ``native_class``; ``native_names`` maps reference names onto native ones (a name,
    or ``(name, index)`` for an element of a tuple such as torch's ``betas``), merged
    along the class hierarchy; names not listed are the same natively.
    """
    bridge = ""
    wraps = ""
    trains = ""
    executor_types: tuple = ()
    native_base: type = object
    native_kind = ""
    hyperparameter: type = NativeHyperparameter
    native_class: type | None = None
    native_names: dict = {}

    def __init_subclass__(cls, **kwargs):
        """Every hyper-parameter a class names and does not define becomes a
        ``hyperparameter`` on its native name."""
        super().__init_subclass__(**kwargs)
        if cls.hyperparameter is NativeHyperparameter:
            return   # a bridge's base, still without its native hyper-parameters
        for name in cls.hyperparameter_names:
            if not hasattr(cls, name):
                setattr(cls, name, cls.hyperparameter(cls.native_name(name)))

    def __init__(self, executor: GraphExecutor, optimizer, loss: str = "loss",
                 events: Sequence[OptimizerEvent] = (), **kwargs):
        self._check_executor(executor)
        super().__init__(executor, loss, events)
        if isinstance(optimizer, type) and issubclass(optimizer, self.native_base):
            optimizer = self._instantiate(optimizer, kwargs)
        elif isinstance(optimizer, self.native_base):
            if kwargs:
                raise Deep500Error(f"{self.name}: keyword arguments {sorted(kwargs)} only "
                                   f"apply when the optimizer is given as a class; this "
                                   f"one is an instance already")
            self._check_instance(optimizer)
        else:
            raise Deep500Error(f"{self.name}: expected a {self.native_kind}, got "
                               f"{type(optimizer).__name__}")
        self.native_optimizer = optimizer

    # -- what a bridge supplies ----------------------------------------------------------
    def _instantiate(self, optimizer_class: type, kwargs: dict):
        """A new ``optimizer_class`` over the network's parameters."""
        raise NotImplementedError

    def _check_instance(self, optimizer) -> None:
        """Raise a Deep500Error when the given instance cannot train this network."""

    def _forget_native_state(self) -> None:
        """Empty the native optimizer's per-parameter state (``state = {}``)."""

    def _native_state(self) -> dict:
        """``{parameter: {slot: ndarray}}``, a copy of the native per-parameter state."""
        raise NotImplementedError

    # -- the bookkeeping -----------------------------------------------------------------
    @classmethod
    def native_name(cls, name: str) -> str | tuple[str, int]:
        """The native name of the reference hyper-parameter ``name``."""
        for klass in cls.__mro__:
            names = klass.__dict__.get("native_names", {})
            if name in names:
                return names[name]
        return name

    @classmethod
    def native_options(cls, **hyperparameters) -> dict:
        """The native optimizer's keyword arguments for reference-named
        ``hyperparameters``; ``(name, index)`` entries become one tuple."""
        options, tuples = {}, {}
        for name, value in hyperparameters.items():
            native = cls.native_name(name)
            if isinstance(native, tuple):
                tuples.setdefault(native[0], {})[native[1]] = value
            else:
                options[native] = value
        for key, elements in tuples.items():
            options[key] = tuple(elements[index] for index in sorted(elements))
        return options

    @property
    def name(self) -> str:
        """The bridge's own class (the one setting ``native_base``) is named after the
        native optimizer it wraps, ``TorchOptimizer(Adam)``; any other after itself."""
        if "native_base" in type(self).__dict__ and hasattr(self, "native_optimizer"):
            return f"{type(self).__name__}({type(self.native_optimizer).__name__})"
        return type(self).__name__

    @property
    def state(self) -> dict:
        """``{parameter: {slot: ndarray}}``: a copy of the native per-parameter state."""
        return self._native_state()

    @state.setter
    def state(self, value: dict) -> None:
        if value:
            raise Deep500Error(f"{self.name}: set the state with load_state_dict")
        if hasattr(self, "native_optimizer"):
            self._forget_native_state()

    def _check_state_owner(self, state: dict) -> None:
        """Raise unless ``state`` was saved by an optimizer of this name."""
        if state.get("optimizer") != self.name:
            raise Deep500Error(f"Cannot load the state of a {state.get('optimizer')} into "
                               f"a {self.name}")

    def _check_executor(self, executor) -> None:
        if not isinstance(executor, self.executor_types):
            framework = getattr(executor, "framework", type(executor).__name__)
            raise Deep500Error(
                f"{self.bridge}.{type(self).__name__} wraps {self.wraps} and trains "
                f"{self.trains} ({self.bridge}.from_onnx(model)); got a {framework} "
                f"executor ({type(executor).__name__}). Use the reference optimizers "
                f"(deep500.frameworks.reference.optimizers) for any executor, or the "
                f"native optimizers of that framework")


__all__ = ["NativeHyperparameter", "NativeOptimizer"]
