"""The reference graph executor: runs a ReferenceNetwork with the NumPy reference operators,
and backpropagates through it (reverse-mode automatic differentiation, one
``backward(grads, fwd_inputs, fwd_outputs)`` call per operation).

A run plan (operation order, when each tensor can be freed) is compiled once per graph
version and reused; operators are created once, when the network is built.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from sys import getrefcount
from time import perf_counter_ns

import numpy as np

from deep500.frameworks._bridge.inner_network import register_inner_network
from deep500.frameworks.reference.network import ReferenceNetwork
from deep500.frameworks.reference.operators._op_common_body import is_float
from deep500.frameworks.reference.operators._op_common_sequence import (as_value,
                                                                         value_nbytes)
from deep500.frameworks.reference.visitor import ReferenceVisitor
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv1_network.network import gradient_name
from deep500.utils.errors import Deep500Error, ModelError, UnsupportedError
from deep500.utils.framework_errors import tag_event, tag_node
from deep500.utils.onnx_interop.onnx_objects import OnnxModel
from deep500.utils.onnx_interop.parser import load_and_parse_model


@dataclass
class _Step:
    """One operation of a plan."""
    op: object                 # the OnnxOperation (what events see)
    forward: object            # its ReferenceOp's bound forward
    backward: object           # its ReferenceOp's bound backward
    inputs: tuple              # tensor names, None for omitted optional inputs
    outputs: tuple             # tensor names, None for omitted optional outputs
    inplace: object = None     # the ReferenceOp's forward_inplace where inference may
    # overwrite the first input (it dies at this step), else None
    taped: object = None       # the ReferenceOp's forward_taped (control flow): its
    # outputs and one more, what its backward needs, used where a backward pass follows


@dataclass
class _Plan:
    version: int
    steps: list
    frees: list                # per step: tensors no later step needs (inference)
    feedable: frozenset        # tensors without a producer: inputs, parameters, constants
    outputs: tuple
    backprop: dict = field(default_factory=dict)   # y -> _BackpropPlan


@dataclass
class _BackpropPlan:
    forward_free: list         # per step: tensors to free after its forward
    backward: list             # (step index, tensors to free after its backward), reversed
    differentiable: frozenset  # tensors that depend on a parameter
    completes: dict = field(default_factory=dict)  # step index -> parameters whose
    # gradient is complete after its backward (it is the first relevant step reading them)


class ReferenceGraphExecutor(GraphExecutor):
    """Runs a :class:`ReferenceNetwork` on the CPU with NumPy.

    Values are arrays; values of sequence type are lists of arrays and an empty optional
    is None, in the inputs fed, inside and in the outputs
    (``operators/_op_common_sequence.py``); gradients flow through arrays only.

    Intermediate tensors are freed as soon as no later operation needs them (in
    ``inference_and_backprop``, those backpropagation needs are kept until their
    operation's backward has run). ``last_peak_bytes`` is the largest total size, during
    the latest run, of the tensors the executor held at once: parameters and constants,
    inputs, intermediate and output tensors, and gradients (a view counts its full size;
    operators' internal temporaries are not counted).

    Operators may offer two faster forms that inference uses: ``forward_first_output``
    for nodes that name only the first output (MaxPool without Indices), and
    ``forward_inplace`` (Relu, BatchNormalization), which writes into the first input
    when no later node reads it and no other array refers to it. Control-flow operators
    (Loop, If, Scan) offer ``forward_taped``, used where a backward pass follows: it
    returns one more, unnamed output, what their backward needs (their bodies' kept
    intermediates, not counted in ``last_peak_bytes``).

    Per-operator events (``wants_operator_events``) fire around each operation's forward;
    with ``events_in_backward = True`` also around each backward, in reverse order.

    Events with ``wants_gradients`` (``lv3_distributed.gradient_buckets``) get
    ``gradient_ready(parameter, gradient)`` as soon as a parameter's gradient is
    complete, after the backward of the first node in graph order that reads it, and
    ``backward_progress()`` after each node's backward (``reports_gradients_early``).
    """
    framework = "reference"
    reports_gradients_early = True
    peak_memory_method = "live tensors held by the reference executor"

    def __init__(self, network: ReferenceNetwork, device=None, events=(),
                 input_specs: dict | None = None, value_inputs=()):
        super().__init__(network, device, events, input_specs)
        if self.device.is_gpu:
            raise UnsupportedError(f"The reference executor runs on the CPU only, not on "
                                   f"{self.device}; use device='cpu'")
        # Inputs of sequence or optional type: fed as lists, arrays or None, they have
        # no tensor spec to check.
        self.value_inputs = tuple(value_inputs)
        self.last_peak_bytes = 0
        self.events_in_backward = False
        self._plan: _Plan | None = None

    # -- plans -------------------------------------------------------------------
    def plan(self) -> _Plan:
        """The compiled run plan of the network's current graph."""
        network = self.network
        if self._plan is not None and self._plan.version == network.version:
            return self._plan
        steps = []
        available = set(network.persistent_tensors) | set(network.inputs)
        feedable = frozenset(available)
        last_use: dict[str, int] = {}
        for index, name in enumerate(network.operation_names()):
            data = network.operation(name)
            op = data["op"]
            for tensor in data["inputs"]:
                if tensor is not None and tensor not in available:
                    raise Deep500Error(
                        f"Network '{network.name}': node '{name}' ({op.op_type}) reads tensor "
                        f"{tensor!r}, which no node computes and which is neither an input "
                        f"nor a parameter or constant; feed it or add the node computing it")
                if tensor is not None:
                    last_use[tensor] = index
            outputs = [o or None for o in op.outputs]
            while outputs and outputs[-1] is None:
                outputs.pop()
            outputs = tuple(outputs)
            for tensor in outputs:
                if tensor is not None:
                    available.add(tensor)
                    last_use.setdefault(tensor, index)
            operator = data["operator"]
            forward = operator.forward
            if len(outputs) == 1 and hasattr(operator, "forward_first_output"):
                # The node asks for the first output only (MaxPool without Indices).
                forward = operator.forward_first_output
            steps.append(_Step(op, forward, operator.backward, tuple(data["inputs"]),
                               outputs, taped=getattr(operator, "forward_taped", None)))
        missing = [o for o in network.outputs if o not in available]
        if missing:
            raise Deep500Error(f"Network '{network.name}': outputs {missing} are computed by "
                               f"no node and are not inputs, parameters or constants")
        keep = feedable | set(network.outputs)
        frees = [[] for _ in steps]
        for tensor, index in last_use.items():
            if tensor not in keep:
                frees[index].append(tensor)
        for step, free in zip(steps, frees):
            step.inplace = self._inplace(step, free, feedable)
        self._plan = _Plan(network.version, steps, [tuple(f) for f in frees], feedable,
                           tuple(network.outputs))
        return self._plan

    @staticmethod
    def _inplace(step: _Step, free, feedable) -> object:
        """The operator's ``forward_inplace`` if inference may let it overwrite its first
        input: an intermediate tensor (not an input, parameter or constant) that no later
        step reads and that the step reads once, for a step with one output. At run
        time ``_forward`` also checks that no other array refers to it (no views)."""
        inplace = getattr(getattr(step.forward, "__self__", None), "forward_inplace", None)
        first = step.inputs[0] if step.inputs else None
        if (inplace is None or first is None or first in feedable or first not in free
                or step.inputs.count(first) != 1 or len(step.outputs) != 1):
            return None
        return inplace

    def _backprop_plan(self, plan: _Plan, y: str) -> _BackpropPlan:
        if y in plan.backprop:
            return plan.backprop[y]
        network = self.network
        differentiable = set(network.get_params())
        for step in plan.steps:
            if any(t in differentiable for t in step.inputs if t is not None):
                differentiable.update(t for t in step.outputs if t is not None)
        # Operations with a parameter among their inputs' ancestors and y among their
        # outputs' descendants: the only ones whose backward contributes.
        reaches_y = {y}
        relevant = []
        for index in reversed(range(len(plan.steps))):
            step = plan.steps[index]
            if (any(t in reaches_y for t in step.outputs if t is not None)
                    and any(t in differentiable for t in step.inputs if t is not None)):
                relevant.append(index)
                reaches_y.update(t for t in step.inputs if t is not None)
        saved = {}   # tensor -> the earliest relevant step (frees it in the backward walk)
        for index in relevant:   # latest first, so earlier steps overwrite
            step = plan.steps[index]
            for t in step.inputs + step.outputs:
                if t is not None:
                    saved[t] = index
        keep = plan.feedable | set(plan.outputs)
        forward_free = [tuple(t for t in free if t not in saved) for free in plan.frees]
        backward_free = {index: [] for index in relevant}
        for tensor, index in saved.items():
            if tensor not in keep:
                backward_free[index].append(tensor)
        completes = {}
        params = set(network.get_params())
        for index in sorted(relevant):
            for t in plan.steps[index].inputs:
                if t in params:
                    params.discard(t)
                    completes.setdefault(index, []).append(t)
        result = _BackpropPlan(forward_free, [(i, tuple(backward_free[i])) for i in relevant],
                               frozenset(differentiable),
                               {i: tuple(names) for i, names in completes.items()})
        plan.backprop[y] = result
        return result

    @staticmethod
    def step_backward(step: _Step, upstream: list, args: list, result) -> list:
        """The input gradients of ``step``'s operator (an exception names its node)."""
        try:
            return step.backward(upstream, args, list(result))
        except Exception as exc:
            tag_node(exc, step.op)
            raise

    @staticmethod
    def _report_gradients(early, names, grads) -> None:
        """Hand the gradients that a node's backward completed to the events that want
        them early, then let them progress; an exception they raise is tagged as the
        hook's (``tag_event``), not reported as the model's."""
        calling = None
        try:
            for name in names:
                g = grads.get(name)
                if g is not None:
                    for event in early:
                        calling = (event, "gradient_ready")
                        event.gradient_ready(name, g)
            for event in early:
                calling = (event, "backward_progress")
                event.backward_progress()
        except Exception as exc:
            if calling is not None:
                tag_event(exc, f"{type(calling[0]).__name__}.{calling[1]}")
            raise

    def _observed_backward(self, step, upstream, args, result, op_events, timed) -> list:
        """``step_backward`` between the operator events' calls, or timed for the events
        that collect per-node backward seconds."""
        if op_events:
            for event in op_events:
                event.before_operator(step.op)
            input_grads = self.step_backward(step, upstream, args, result)
            for event in op_events:
                event.after_operator(step.op)
            return input_grads
        t0 = perf_counter_ns()
        input_grads = self.step_backward(step, upstream, args, result)
        seconds = (perf_counter_ns() - t0) * 1e-9
        for event in timed:
            event.record_backward_time(step.op, seconds)
        return input_grads

    def accumulate_inputs(self, step: _Step, input_grads, args, grads: dict,
                          accumulated: set, names, floats_only: bool = False) -> int:
        """Add the step's input gradients into ``grads`` for the inputs in ``names`` (and,
        with ``floats_only``, of a floating type); returns the bytes newly allocated."""
        added = 0
        for position, (name, g) in enumerate(zip(step.inputs, input_grads)):
            if g is None or name not in names:
                continue
            if floats_only and not is_float(args[position]):
                continue
            added += self._accumulate(grads, accumulated, name, g, args[position], step)
        return added

    @staticmethod
    def _accumulate(grads: dict, accumulated: set, name: str, g, value, step) -> int:
        """Add gradient ``g`` of tensor ``name`` (value ``value``) into ``grads``; returns
        the bytes newly allocated."""
        if type(g) is not np.ndarray:
            g = np.asarray(g)
        if g.shape != value.shape:
            raise Deep500Error(f"Reference operator {step.op.op_type} (node '{step.op.name}') "
                               f"returned a gradient of shape {g.shape} for its input "
                               f"{name!r} of shape {value.shape}")
        previous = grads.get(name)
        if previous is None:
            grads[name] = g
            return g.nbytes
        if name in accumulated:
            previous += g
            return 0
        # The first gradient may be a view of an array used elsewhere: add out of place,
        # then in place into the sum, which the executor owns.
        grads[name] = previous + g
        accumulated.add(name)
        return g.nbytes

    # -- runs ----------------------------------------------------------------------
    def _check_inputs_fully(self, inputs: dict) -> None:
        super()._check_inputs_fully(inputs)
        missing = [name for name in self.value_inputs if name not in inputs]
        if missing:
            raise ModelError(f"Network '{self.network.name}' needs the sequence or optional "
                             f"inputs {missing} (given: {sorted(inputs)}); feed a list of "
                             f"arrays for a sequence, None for an empty optional")

    def _environment(self, plan: _Plan, inputs: dict) -> dict:
        env = dict(self.network.persistent_tensors)
        for name, value in inputs.items():
            if name in plan.feedable:
                env[name] = as_value(value)
        return env

    def _forward(self, plan: _Plan, env: dict, frees, saved: dict | None) -> tuple[int, int]:
        """Run every step, freeing ``frees[i]`` after step i; for the step indices in
        ``saved``, keep (inputs, all outputs) there. Returns the peak and the final count
        of live bytes."""
        live = sum(value_nbytes(v) for v in env.values())
        peak = live
        env[None] = None   # an omitted optional input reads as None
        op_events = self.operator_events
        ndarray = np.ndarray
        step = result = None
        try:
            for index, step in enumerate(plan.steps):
                args = [env[t] for t in step.inputs]
                forward, inplace = step.forward, False
                if step.inplace is not None and saved is None:
                    # Overwrite the dying first input only if nothing else refers to it:
                    # env, args, x, getrefcount's argument, and the previous step's
                    # result if it is x; a view of x (its .base) would add one.
                    x = args[0]
                    if (type(x) is ndarray and x.base is None and x.flags.writeable and
                            getrefcount(x) <= 4 + (result is x)):
                        forward, inplace = step.inplace, True
                    x = None
                elif step.taped is not None and saved is not None and index in saved:
                    forward = step.taped
                if op_events:
                    for event in op_events:
                        event.before_operator(step.op)
                    result = forward(*args)
                    for event in op_events:
                        event.after_operator(step.op)
                else:
                    result = forward(*args)
                if type(result) is ndarray and saved is None and len(step.outputs) < 2:
                    # The common case: one output array, nothing kept for a backward pass.
                    nbytes = result.nbytes
                    if live + nbytes > peak and not (inplace and result is args[0]):
                        peak = live + nbytes
                    if step.outputs:
                        env[step.outputs[0]] = result
                        live += nbytes
                else:
                    result = self._outputs(step, result)
                    produced = sum(value_nbytes(r) for r in result)
                    if live + produced > peak:
                        peak = live + produced
                    for name, value in zip(step.outputs, result):
                        if name is not None:
                            env[name] = value
                            live += value_nbytes(value)
                    if saved is not None and index in saved:
                        saved[index] = (args, result)
                        # Every output, named or not, stays alive until the backward pass.
                        live += sum(value_nbytes(r) for name, r in
                                    zip(step.outputs + (None,) * len(result), result)
                                    if name is None)
                for name in frees[index]:
                    # No local name for the freed value: it may be the array the next
                    # step overwrites in place, whose references are counted.
                    live -= value_nbytes(env.pop(name))
        except Exception as exc:
            if step is not None:
                tag_node(exc, step.op)
            raise
        del env[None]
        return peak, live

    def _outputs(self, step: _Step, result) -> tuple:
        """An operator's result as a tuple of values (arrays, sequences as lists, None for
        an empty optional) with one per named output at least."""
        if type(result) is not tuple:
            result = tuple(result) if isinstance(result, list) else (result,)
        if any(type(r) is not np.ndarray for r in result):
            result = tuple(as_value(r) for r in result)
        if len(result) < len(step.outputs):
            raise Deep500Error(f"Reference operator {step.op.op_type} returned {len(result)} "
                               f"outputs; node '{step.op.name}' of network "
                               f"'{self.network.name}' names {len(step.outputs)}")
        return result

    def _inference(self, inputs: dict) -> dict:
        plan = self.plan()
        env = self._environment(plan, inputs)
        self.last_peak_bytes, _ = self._forward(plan, env, plan.frees, None)
        outputs = {name: env[name] for name in plan.outputs}
        self.network.store_results(outputs)
        return outputs

    def _inference_and_backprop(self, inputs: dict, y: str) -> dict:
        network = self.network
        if y not in network.outputs:
            raise Deep500Error(f"Cannot backpropagate from {y!r}: it is not an output of "
                               f"network '{network.name}' (outputs: {network.outputs}). Pass "
                               f"y= the name of the scalar loss output")
        plan = self.plan()
        bplan = self._backprop_plan(plan, y)
        env = self._environment(plan, inputs)
        saved = {index: None for index, _ in bplan.backward}
        peak, live = self._forward(plan, env, bplan.forward_free, saved)
        outputs = {name: env[name] for name in plan.outputs}
        loss = env[y]
        if loss.size != 1 or not np.issubdtype(loss.dtype, np.floating):
            raise Deep500Error(f"Cannot backpropagate from {y!r} of network '{network.name}': "
                               f"it must be a floating-point scalar, got shape "
                               f"{list(loss.shape)} and dtype {loss.dtype}")
        grads = {y: np.ones_like(loss)}
        live += loss.nbytes
        peak = max(peak, live)
        accumulated = set()    # gradients the executor allocated itself (safe to add into)
        differentiable = bplan.differentiable
        op_events = self.operator_events if self.events_in_backward else ()
        # Events that collect per-node backward seconds (OperatorTimes): each node's
        # backward function is timed on its own.
        timed = [e for e in self.events if getattr(e, "wants_backward_times", False)]
        early = [e for e in self.events if getattr(e, "wants_gradients", False)]
        completes = bplan.completes
        for index, free in bplan.backward:
            step = plan.steps[index]
            args, result = saved.pop(index)
            upstream = [grads.pop(t, None) for t in step.outputs]
            upstream += [None] * (len(result) - len(upstream))
            if any(g is not None for g in upstream):
                if op_events or timed:
                    input_grads = self._observed_backward(step, upstream, args, result,
                                                          op_events, timed)
                else:
                    input_grads = self.step_backward(step, upstream, args, result)
                live += self.accumulate_inputs(step, input_grads, args, grads, accumulated,
                                               differentiable)
                peak = max(peak, live)
            # The step's upstream gradients, unnamed outputs and saved tensors are dead now.
            live -= sum(g.nbytes for g in upstream if g is not None)
            live -= sum(value_nbytes(r) for r in result[len(step.outputs):])
            live -= sum(value_nbytes(r) for name, r in zip(step.outputs, result)
                        if name is None)
            for name in free:
                live -= value_nbytes(env.pop(name))
            if early:
                self._report_gradients(early, completes.get(index, ()), grads)
        gradients = {}
        for param in network.get_params():
            g = grads.get(param)
            if g is None:
                g = np.zeros_like(env[param])
            elif not g.flags.writeable:
                g = g.copy()
            gradients[gradient_name(param)] = g
        self.last_peak_bytes = peak
        outputs.update(gradients)
        network.store_results(outputs)
        return outputs


def from_onnx(path_or_model, device=None, events=(), **options) -> ReferenceGraphExecutor:
    """A reference executor for an ONNX model (a path, an ``onnx.ModelProto`` or a parsed
    :class:`OnnxModel`). The reference executor takes no options."""
    if options:
        raise Deep500Error(f"The reference executor takes no options; got "
                           f"{sorted(options)}")
    model = (path_or_model if isinstance(path_or_model, OnnxModel)
             else load_and_parse_model(path_or_model))
    network = ReferenceNetwork(model.name)
    ReferenceVisitor().visit_model(model, network)
    values = value_typed_inputs(model)
    executor = ReferenceGraphExecutor(
        network, device, events,
        {vi.name: vi for vi in model.feed_inputs if vi.name not in values},
        [vi.name for vi in model.feed_inputs if vi.name in values])
    executor.plan()
    return executor


def value_typed_inputs(model: OnnxModel) -> set:
    """The names of the model's graph inputs of sequence or optional type."""
    if model.proto is None:
        return set()
    return {value.name for value in model.proto.graph.input
            if value.type.WhichOneof("value") in ("sequence_type", "optional_type")}


def body_executor(model: OnnxModel, where: str) -> ReferenceGraphExecutor:
    """The executor of a control-flow body (a graph attribute, ``where`` names it): a
    reference network built from the body's parsed ``model``, whose outer-scope names are
    inputs too. The control-flow operators get it through the inner-network registry."""
    network = ReferenceNetwork(where)
    ReferenceVisitor(where).visit_model(model, network)
    for name in model.outer_inputs:
        network.add_input(name)
    return ReferenceGraphExecutor(network)


register_inner_network("reference", body_executor)
