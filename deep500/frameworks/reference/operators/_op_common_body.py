"""Shared machinery of the control-flow operators (Loop, If, Scan, SequenceMap): a body
(a graph attribute) run as a nested reference network, forward and in reverse mode.

ONNX control flow: https://onnx.ai/onnx/repo-docs/IR.html#graphs (nested graphs and
outer-scope names). A body reads the names it neither takes as input nor computes from
the enclosing graphs; the parser lists them (``OnnxModel.outer_inputs``) and makes them
the node's ``implicit_inputs``, which the reference network appends to the node's
inputs, so that they are scheduled, freed and differentiated like explicit inputs.

Where a backward pass follows, the executor calls ``forward_taped``: the bodies run
keeping every intermediate (one tape per iteration), and the tapes travel to
``backward`` as one extra, unnamed output; inference keeps none. The operator holds no
state between forward and backward, so nested control flow (a Loop in a Loop body, whose
tapes sit in the outer body's tape) is differentiated exactly. Called without a tape
(``backward`` on outputs of ``forward``), backward first recomputes the forward keeping
the intermediates.
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks._bridge.inner_network import inner_network_factory
from deep500.frameworks.reference.operators._op_common_sequence import (as_value,
                                                                         copy_value,
                                                                         is_sequence)
from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import Deep500Error, ShapeError
from deep500.utils.onnx_interop.onnx_objects import OnnxModel


def is_float(value) -> bool:
    """Whether gradients flow through ``value`` (float tensors only)."""
    return (value is not None and not is_sequence(value)
            and np.issubdtype(np.asarray(value).dtype, np.floating))


def scalar(value, what: str):
    """The Python value of a one-element tensor (Loop's M and cond, If's cond)."""
    array = np.asarray(value)
    if array.size != 1:
        raise ShapeError(f"{what} must hold one element, got shape {list(array.shape)}")
    return array.reshape(-1)[0].item()


class Body:
    """One graph attribute of a node as a :class:`ReferenceNetwork` built once: its
    inputs, its outer-scope names (extra inputs) and its outputs."""

    def __init__(self, model: OnnxModel, where: str):
        # The reference executor registers the factory (this package cannot import it:
        # the executor imports the visitor, which imports the operators).
        executor = inner_network_factory("reference")(model, where)
        network = executor.network
        self.where = where
        self.model = model
        self.inputs = [v.name for v in model.inputs]
        self.outputs = [v.name for v in model.outputs]
        self.outer = list(model.outer_inputs)
        self.network = network
        self._executor = executor
        self._plan = executor.plan()
        # Names gradients can reach: inputs, outer names and what is computed from them
        # (not the body's own constants).
        reached = set(self.inputs) | set(self.outer)
        self._relevant = []
        for index, step in enumerate(self._plan.steps):
            if any(t in reached for t in step.inputs if t is not None):
                reached.update(t for t in step.outputs if t is not None)
                self._relevant.append(index)
        self._reached = frozenset(reached)
        self._relevant.reverse()

    def _env(self, values: list, outer: dict) -> dict:
        if len(values) != len(self.inputs):
            raise Deep500Error(f"{self.where}: the body takes {len(self.inputs)} inputs "
                               f"({self.inputs}), the node passes {len(values)}")
        env = dict(self.network.persistent_tensors)
        env.update(outer)
        for name, value in zip(self.inputs, values):
            env[name] = as_value(value)
        return env

    def run(self, values: list, outer: dict) -> list:
        """The body's outputs for input ``values`` (in body input order) and outer-scope
        values ``outer`` (name -> array)."""
        env = self._env(values, outer)
        self._executor._forward(self._plan, env, self._plan.frees, None)
        return [env[name] for name in self.outputs]

    def run_taped(self, values: list, outer: dict) -> tuple[list, dict]:
        """The body's outputs and the tape its :meth:`backward` needs."""
        env = self._env(values, outer)
        tape = {index: None for index in self._relevant}
        self._executor._forward(self._plan, env, self._plan.frees, tape)
        return [env[name] for name in self.outputs], tape

    def backward(self, tape: dict, output_grads: list) -> dict:
        """Reverse mode through one run: gradients (name -> array) of the body's float
        inputs and outer-scope names, given gradients of its outputs (None where
        none flows)."""
        grads, owned = {}, set()
        for name, g in zip(self.outputs, output_grads):
            if g is None or name not in self._reached:
                continue
            self._seed(grads, owned, name, g)
        steps = self._plan.steps
        for index in self._relevant:
            step = steps[index]
            args, result = tape[index]
            upstream = [grads.pop(t, None) if t is not None else None for t in step.outputs]
            if all(g is None for g in upstream):
                continue
            upstream += [None] * (len(result) - len(upstream))
            input_grads = self._executor.step_backward(step, upstream, args, result)
            self._executor.accumulate_inputs(step, input_grads, args, grads, owned,
                                             self._reached, floats_only=True)
        return grads

    @staticmethod
    def _seed(grads: dict, owned: set, name: str, g) -> None:
        g = np.asarray(g)
        previous = grads.get(name)
        if previous is None:
            grads[name] = g
        elif name in owned:
            previous += g
        else:
            grads[name] = previous + g
            owned.add(name)

    def empty_output(self, position: int, iterations_axis: int = 0) -> np.ndarray:
        """A scan output of zero iterations: shape and type from the body's declared
        output (unknown dimensions read as 0)."""
        info = self.model.outputs[position]
        shape = [d if isinstance(d, int) else 0 for d in (info.shape or ())]
        shape.insert(iterations_axis if iterations_axis >= 0 else
                     len(shape) + 1 + iterations_axis, 0)
        return np.zeros(shape, info.dtype or np.float32)


class ControlFlowOp(ReferenceOp):
    """A reference operator with graph attributes. The visitor binds it to its parsed
    node (:meth:`bind_node`): its bodies, its number of explicit inputs, and the
    outer-scope names (``implicit_inputs``) that follow them among its inputs."""
    graph_attributes: tuple = ()
    optional_graph_attributes: tuple = ()   # bodies a node may leave out

    def __init__(self, **attributes):
        super().__init__(**attributes)
        self.bodies: dict[str, Body] | None = None
        self.explicit = 0
        self.implicit: list[str] = []

    def bind_node(self, op) -> None:
        """Build the bodies of the parsed node ``op`` (``op.subgraphs``)."""
        self.explicit = len(op.inputs)
        self.implicit = list(getattr(op, "implicit_inputs", ()))
        self.bodies = {}
        subgraphs = getattr(op, "subgraphs", None) or {}
        for key in self.graph_attributes + self.optional_graph_attributes:
            where = f"body {key!r} of node '{op.name}' ({op.op_type})"
            model = subgraphs.get(key)
            if model is not None:
                self.bodies[key] = Body(model, where)
            elif key in self.graph_attributes:
                raise Deep500Error(f"{where}: the node has no graph attribute {key!r}")

    def split(self, args) -> tuple[list, dict]:
        """The explicit inputs (None where omitted) and the outer-scope values."""
        if self.bodies is None:
            raise Deep500Error(f"{self.op_type}: the operator has no bodies; build it from "
                               f"an ONNX node with the ReferenceVisitor (d5ref.from_onnx)")
        explicit = list(args[:self.explicit])
        explicit += [None] * (self.explicit - len(explicit))
        outer = dict(zip(self.implicit, args[self.explicit:]))
        return explicit, outer

    def input_grads(self, args, explicit_grads: list, outer_grads: dict) -> list:
        """One gradient per input the executor passed: the explicit ones, then those of
        the outer-scope names; None for non-float tensors."""
        grads = list(explicit_grads) + [outer_grads.get(name) for name in self.implicit]
        grads = grads[:len(args)]
        return [g if g is not None and is_float(a) else None for g, a in zip(grads, args)]


class IteratingOp(ControlFlowOp):
    """Loop and Scan: ``_outputs(args, tapes)`` runs every iteration, appending one
    tape per iteration to ``tapes`` when it is a list."""

    def _outputs(self, args, tapes=None) -> list:
        raise NotImplementedError

    def forward(self, *args):
        return self._outputs(args)

    def forward_taped(self, *args):
        tapes = []
        return with_tapes(self._outputs(args, tapes), tapes)


class _Tapes:
    """What a control-flow operator's backward reads, passed as its last output."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def with_tapes(outputs: tuple, tapes) -> tuple:
    """``outputs`` and ``tapes`` as one more output (a 0-d object array, so that the
    executor stores it like any output)."""
    holder = np.empty((), dtype=object)
    holder[()] = _Tapes(tapes)
    return tuple(outputs) + (holder,)


def read_tapes(fwd_outputs, count: int):
    """The tapes ``forward_taped`` appended after ``count`` outputs, or None."""
    if len(fwd_outputs) > count:
        holder = fwd_outputs[count]
        if isinstance(holder, np.ndarray) and holder.dtype == object and holder.ndim == 0 \
                and isinstance(holder[()], _Tapes):
            return holder[()].value
    return None


def own(outputs, args, persistent: dict) -> tuple:
    """``outputs`` with copies of those that are an input or a body's constant, so that
    no output aliases a tensor the caller or the body keeps."""
    kept = {id(a) for a in args if a is not None}
    kept.update(id(v) for v in persistent.values())
    return tuple(copy_value(v) if id(v) in kept else v for v in outputs)


def add(total: dict, grads: dict, names) -> None:
    """Add ``grads[name]`` into ``total[name]`` (arrays ``total`` owns) for ``names``."""
    for name in names:
        g = grads.get(name)
        if g is None:
            continue
        previous = total.get(name)
        if previous is None:
            total[name] = np.array(g, copy=True)
        else:
            previous += g
