"""TensorFlow networks: an ONNX graph run as TensorFlow operations, and a Keras model
behind the same :class:`~deep500.lv1_network.network.Network` interface.

A :class:`TensorFlowNetwork` keeps parameters (floating-point initializers) as
``tf.Variable``s, other initializers as constants, the ONNX operations, and the
:class:`~deep500.frameworks.tensorflow._plan.Plan` built from them: a flat list of
prebuilt closures. ``run`` executes the plan; the executor runs it eagerly or traces it
once into a ``tf.function``.
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks._bridge.inner_network import register_inner_network
from deep500.frameworks.tensorflow._layout import ParameterLayout
from deep500.frameworks.tensorflow._plan import Plan
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._value_kinds import to_numpy
from deep500.frameworks.tensorflow.visitor import TensorFlowVisitor
from deep500.lv1_network.network import Network
from deep500.utils.device import parse_device
from deep500.utils.errors import Deep500Error, UnsupportedError
from deep500.utils.framework_errors import tag_node
from deep500.utils.onnx_interop.added_nodes import normalize_operations


class TensorFlowNetwork(Network):
    """An ONNX graph as TensorFlow operations.

    Attributes:
        variables: ``{name: tf.Variable}`` of floating-point tensors: the parameters
            (trainable; see ``get_params``) and other stored values such as batch-norm
            running statistics (not trainable, so that changing them retraces
            nothing). Each is stored in the layout of ``layouts[name]`` if it has one
            (see ``ParameterLayout``).
        constants: ``{name: np.ndarray}``, non-floating initializers.
        inputs: names of the tensors a caller feeds.
        operations: the ONNX operations, in the order given.
        shapes, dtypes: static ONNX shapes and element types from shape inference
            (``None``: unknown).
        version: changes with every change to the graph; executors retrace then.
    """

    def __init__(self, name: str, device=None, builder: TensorFlowVisitor | None = None):
        super().__init__(name)
        self.device = parse_device(device)
        self.builder = builder or TensorFlowVisitor()
        self.variables: dict[str, tf.Variable] = {}
        self.layouts: dict[str, ParameterLayout] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.inputs: list[str] = []
        self.operations: list = []
        self.shapes: dict[str, tuple | None] = {}
        self.dtypes: dict[str, np.dtype | None] = {}
        self.gradients: dict[str, np.ndarray] = {}
        # values of types TensorFlow cannot compute with, carried in a wider type
        # (deep500.utils.onnx_interop.carried_types): {input: carrier dtype} and
        # {output: declared dtype}
        self.carried_inputs: dict[str, np.dtype] = {}
        self.carried_outputs: dict[str, np.dtype] = {}
        # {value: declared dtype} of every carried value (ops/_carried_casts.py)
        self.carried_types: dict[str, np.dtype] = {}
        self.version = 0
        self._plan: Plan | None = None
        self._initial: dict | None = None
        self._last: dict = {}       # tensors of the latest run, by key

    # -- tensors -----------------------------------------------------------------
    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        """Set a stored tensor: in place if it has this shape and dtype (and, with
        ``is_param``, is already a parameter); else (re)create it: a trainable
        variable with ``is_param`` (floating point only), a non-trainable variable for
        other floating-point values, a constant otherwise."""
        value = np.asarray(value)
        floating = np.issubdtype(value.dtype, np.floating)
        variable = self.variables.get(name)
        if variable is not None:
            layout = self.layouts.get(name)
            shape = layout.shape if layout is not None else tuple(variable.shape)
            if (shape == value.shape and variable.dtype.as_numpy_dtype == value.dtype
                    and (variable.trainable or not is_param)):
                variable.assign(layout.to_stored(value) if layout is not None else value)
                return
            self.layouts.pop(name, None)
            is_param = is_param or variable.trainable
        if is_param and not floating:
            raise Deep500Error(f"Network '{self.name}': parameter {name!r} must be a "
                               f"floating-point tensor, got {value.dtype}")
        producer = self._producer(name)
        if producer is not None:
            raise Deep500Error(f"Network '{self.name}': tensor {name!r} is computed by node "
                               f"'{producer}' and cannot be fed; remove the node first")
        if floating:
            self.constants.pop(name, None)
            with tf.device(self.device.tf_device()):
                self.variables[name] = tf.Variable(value, trainable=is_param,
                                                   name=_variable_name(name))
        else:
            self.variables.pop(name, None)
            self.constants[name] = value
        self._changed()

    def fetch_tensor(self, name: str) -> np.ndarray:
        """A parameter, constant or gradient, or a tensor of the latest run (every tensor
        in eager mode; only the outputs in function mode)."""
        if name in self.variables:
            return self.to_onnx(name, self.variables[name].numpy())
        if name in self.gradients:
            return self.gradients[name]
        if name in self._last:
            return to_numpy(self._last[name])
        converter = self._plan.converters.get(name) if self._plan is not None else None
        if converter is not None and converter[0] in self._last:
            key, convert = converter
            return to_numpy(convert(self._last[key]))
        if name in self.constants:
            return self.constants[name]
        known = (list(self.variables) + list(self.constants) + list(self.gradients)
                 + [k for k in self._last if "|" not in k])
        error = self._unknown_tensor(name, known)
        if any(name in op.outputs for op in self.operations):
            error = Deep500Error(f"Network '{self.name}': tensor {name!r} was not kept by the "
                                 f"latest run (a traced function keeps only the outputs); add "
                                 f"it with network.add_output({name!r}) or run in "
                                 f"mode='eager'")
        raise error

    def get_params(self) -> list[str]:
        """The trainable parameters, in the order of the model's initializers."""
        return [name for name, variable in self.variables.items() if variable.trainable]

    # -- graph ---------------------------------------------------------------------
    def add_node(self, op) -> None:
        """Add an ``OnnxOperation``; its inputs must be computed by other nodes, fed, or
        stored in the network by the next run."""
        if any(existing.name == op.name for existing in self.operations):
            raise Deep500Error(f"Network '{self.name}' already has a node named "
                               f"'{op.name}'; remove it first or rename the new one")
        # The node of an older opset in the form every visitor reads (normalize.py).
        nodes, constants = normalize_operations([op], self.name)
        for node in nodes:
            self.builder.visitor_for(node)   # raises for operators the executor lacks
        self.constants.update(constants)
        self.operations.extend(nodes)
        self._changed()

    def remove_node(self, name: str) -> None:
        for index, op in enumerate(self.operations):
            if op.name == name:
                del self.operations[index]
                self._changed()
                return
        raise Deep500Error(f"Network '{self.name}' has no node '{name}' (nodes: "
                           f"{[op.name for op in self.operations][:10]}...)")

    def add_output(self, name: str) -> None:
        if name not in self.outputs:
            super().add_output(name)
            self._changed()

    # -- running -------------------------------------------------------------------
    @property
    def plan(self) -> Plan:
        """The plan of the current graph (built when the graph has changed)."""
        if self._plan is None:
            self.set_plan(self.builder.build(self, self._sorted_operations()))
        return self._plan

    def set_plan(self, plan: Plan) -> None:
        self._plan = plan
        initial = dict(plan.constants)
        initial.update(self.constants)
        initial.update(self.variables)
        self._initial = initial

    def environment(self, feeds: dict) -> dict:
        """The tensors a run of the plan starts from, by key: build-time constants,
        stored tensors and ``feeds``."""
        self.plan   # builds the plan, and the stored tensors with it, if needed
        env = dict(self._initial)
        env.update(feeds)
        return env

    def run(self, feeds: dict, operator_events=(), device=None) -> dict:
        """Run the plan on ``feeds`` (``{name: tensor}``); returns every tensor by key.

        With ``operator_events``, each ONNX node's steps are bracketed by the events'
        ``before_operator``/``after_operator`` (after a synchronisation of ``device``
        when it is a GPU)."""
        plan = self.plan
        env = dict(self._initial)
        env.update(feeds)
        if not operator_events:
            fn = None
            try:
                for fn, inputs, output in plan.steps:
                    if output.__class__ is str:
                        env[output] = fn(*[env[k] for k in inputs])
                    else:
                        env.update(zip(output, fn(*[env[k] for k in inputs])))
            except Exception as exc:
                self._tag_failing(exc, fn)
                raise
            return env
        sync = device.synchronize if device is not None and device.is_gpu else None
        for op, steps in plan.node_steps:
            run_node(op, steps, env, operator_events, sync)
        return env

    def _tag_failing(self, exc: Exception, fn) -> None:
        """Name on ``exc`` the ONNX node whose step ``fn`` raised it (searched only on
        failure)."""
        for op, steps in self.plan.node_steps:
            if op is not None and any(step[0] is fn for step in steps):
                tag_node(exc, op)
                return

    def keep(self, tensors: dict) -> None:
        """Keep the tensors of the latest run for ``fetch_tensor``."""
        self._last = tensors

    def store_gradients(self, gradients: dict) -> None:
        self.gradients = gradients

    def to_onnx(self, parameter: str, stored: np.ndarray) -> np.ndarray:
        """A parameter's value or gradient, from its stored layout to ONNX's."""
        layout = self.layouts.get(parameter)
        return stored if layout is None else layout.to_onnx(stored)

    def store_parameters(self, layouts: dict[str, ParameterLayout]) -> None:
        """Store each parameter in ``layouts[name]`` (the others in ONNX's layout),
        converting the variables whose layout changes."""
        for name, variable in list(self.variables.items()):
            want, have = layouts.get(name), self.layouts.get(name)
            if want == have:
                continue
            value = self.to_onnx(name, variable.numpy())
            stored = want.to_stored(value) if want is not None else np.require(value, requirements="C")
            with tf.device(self.device.tf_device()):
                self.variables[name] = tf.Variable(stored, trainable=variable.trainable,
                                                   name=_variable_name(name))
            if want is None:
                self.layouts.pop(name)
            else:
                self.layouts[name] = want

    # -- internals -----------------------------------------------------------------
    def _changed(self) -> None:
        self.version += 1
        self._plan = None
        if self._initial is not None:
            self._initial = None

    def _producer(self, name: str) -> str | None:
        for op in self.operations:
            if name in op.outputs:
                return op.name
        return None

    def _sorted_operations(self) -> list:
        """Operations in a topological order, stable with respect to the given order."""
        produced_by = {}
        for op in self.operations:
            for out in op.outputs:
                if out:
                    produced_by[out] = op.name
        pending = list(self.operations)
        done: set[str] = set()
        order = []
        while pending:
            remaining = []
            for op in pending:
                needs = {produced_by[i] for i in op.inputs + op.implicit_inputs
                         if i in produced_by}
                needs.discard(op.name)
                if needs <= done:
                    order.append(op)
                    done.add(op.name)
                else:
                    remaining.append(op)
            if len(remaining) == len(pending):
                raise Deep500Error(f"Network '{self.name}': nodes "
                                   f"{[op.name for op in remaining][:10]} form a cycle")
            pending = remaining
        return order


# Control-flow bodies (ops/control.py) are networks of this kind too.
register_inner_network("tensorflow", TensorFlowNetwork)


def run_node(op, steps, env: dict, operator_events=(), sync=None) -> None:
    """Run one ONNX node's plan steps on ``env`` (tensors by key, updated in place),
    bracketed by the events' ``before_operator``/``after_operator`` (after ``sync()``
    where given: a GPU's synchronisation). ``op`` is None for steps that belong to no
    node (feeds' conversions); a failure names the node."""
    if op is not None:
        if sync:
            sync()
        for event in operator_events:
            event.before_operator(op)
    try:
        for fn, inputs, output in steps:
            if output.__class__ is str:
                env[output] = fn(*[env[k] for k in inputs])
            else:
                env.update(zip(output, fn(*[env[k] for k in inputs])))
    except Exception as exc:
        if op is not None:
            tag_node(exc, op)
        raise
    if op is not None:
        if sync:
            sync()
        for event in operator_events:
            event.after_operator(op)


def _variable_name(name: str) -> str:
    # TensorFlow variable names may not hold ':' (it separates the output index).
    return name.replace(":", "_") or "parameter"


class KerasNetwork(Network):
    """A Keras model's trainable variables and latest outputs, named as Deep500 names
    them: each variable by its Keras ``path`` (unique in the model, e.g.
    ``sequential/dense/kernel``), or ``name`` where it has none."""

    def __init__(self, model, output_names):
        super().__init__(getattr(model, "name", None) or type(model).__name__)
        self.model = model
        self.outputs = list(output_names)
        self.variables: dict[str, object] = {}
        for variable in model.trainable_variables:
            name = getattr(variable, "path", None) or variable.name
            base, index = name, 1
            while name in self.variables:
                index += 1
                name = f"{base}_{index}"
            self.variables[name] = variable
        self.gradients: dict[str, np.ndarray] = {}
        self._last: dict = {}

    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        if name not in self.variables:
            raise UnsupportedError(f"Keras model '{self.name}' has no trainable variable "
                                   f"{name!r}; variables: {list(self.variables)[:10]}")
        self.variables[name].assign(np.asarray(value))

    def fetch_tensor(self, name: str) -> np.ndarray:
        if name in self.variables:
            return np.asarray(self.variables[name].numpy())
        if name in self.gradients:
            return self.gradients[name]
        if name in self._last:
            return to_numpy(self._last[name])
        raise self._unknown_tensor(name, list(self.variables) + list(self.outputs))

    def get_params(self) -> list[str]:
        return list(self.variables)

    def add_node(self, op) -> None:
        raise UnsupportedError(f"Keras model '{self.name}': its graph cannot be edited "
                               f"through Deep500; change the Keras model, or convert it to "
                               f"ONNX and use deep500.frameworks.tensorflow.from_onnx")

    def remove_node(self, name: str) -> None:
        self.add_node(None)

    def add_output(self, name: str) -> None:
        if name not in self.outputs:
            raise UnsupportedError(f"Keras model '{self.name}': only the model's outputs "
                                   f"{self.outputs} can be fetched, not {name!r}")

    def keep(self, tensors: dict) -> None:
        self._last = tensors

    def store_gradients(self, gradients: dict) -> None:
        self.gradients = gradients

    def to_onnx(self, parameter: str, stored: np.ndarray) -> np.ndarray:
        return stored
