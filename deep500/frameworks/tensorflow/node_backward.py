"""Backpropagation of a :class:`TensorFlowNetwork` node by node, so that each ONNX node's
backward pass can be timed (``OperatorTimes``' backward times, ``FrameworkOverhead`` of
backprop).

The executor's fast path records the whole forward pass on one ``tf.GradientTape`` and
gets every parameter's gradient from one ``tape.gradient`` call: TensorFlow's backward
pass is then one call, with no node boundaries to time. When an event asks for per-node
backward times, the forward pass instead records each node on a tape of its own that
watches the node's inputs that depend on a parameter, and the backward pass walks the
nodes in reverse order, calling each node's ``tape.gradient`` with the gradients of its
outputs (``output_gradients``, https://www.tensorflow.org/api_docs/python/tf/GradientTape
#gradient). This is reverse-mode accumulation over the graph of nodes instead of the
graph of TensorFlow operations (Griewank & Walther, *Evaluating Derivatives*, 2nd ed.,
2008, ch. 3): the chain rule gives the same gradients, and what differs is only the
order in which TensorFlow sums the contributions of several consumers to one tensor.

A node's backward time is the gradient call on its tape (after a device synchronisation
on a GPU); summing contributions to a tensor happens between the calls and so counts as
overhead, as in the reference executor.
"""
from __future__ import annotations

from time import perf_counter_ns

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.network import run_node
from deep500.utils.framework_errors import tag_node

try:
    # The backward computation under GradientTape.gradient, which first normalises its
    # arguments (nest flattening, composite-tensor checks): measured ~0.2 ms a call on a
    # shared 2-core CPU against ~20 us for the computation of a one-operation tape, and
    # more than many nodes' whole backward pass. Called directly where it exists.
    from tensorflow.python.eager.imperative_grad import imperative_grad as _imperative_grad
    from tensorflow.python.ops.unconnected_gradients import UnconnectedGradients
    _UNCONNECTED = UnconnectedGradients.NONE
except ImportError:   # a TensorFlow whose internals moved: the public method
    _imperative_grad = None

_TENSORS = (tf.Tensor, tf.Variable)


def _floating(value) -> bool:
    return isinstance(value, _TENSORS) and value.dtype.is_floating


class NodeBackward:
    """Per node of a network's plan: its ONNX operation (``None`` for the final layout
    conversions of outputs), its steps, the keys it reads that depend on a trainable
    parameter (``sources``: what its tape watches and differentiates for) and the keys
    it writes.

    Args:
        plan: the network's :class:`~deep500.frameworks.tensorflow._plan.Plan`.
        parameters: keys of the trainable parameters (``network.get_params()``).
    """

    def __init__(self, plan, parameters):
        self.plan = plan
        self.nodes: list[tuple] = []
        differentiable = set(parameters)
        for op, steps in plan.node_steps:
            written: list[str] = []
            sources: list[str] = []
            for _, inputs, output in steps:
                for key in inputs:
                    if key in differentiable and key not in written and key not in sources:
                        sources.append(key)
                written.extend((output,) if output.__class__ is str else output)
            if sources:
                differentiable.update(written)
            self.nodes.append((op, steps, tuple(sources), tuple(written)))

    def forward(self, env: dict, operator_events=(), sync=None) -> list[tuple]:
        """Run every node on ``env`` (``{key: tensor}``, updated in place), each node that
        reads a parameter-dependent floating-point tensor on its own tape; with
        ``operator_events``, bracketed as in ``TensorFlowNetwork.run``. Returns the
        records ``(op, tape, watched keys, written keys)`` that ``backward`` walks."""
        records = []
        for op, steps, sources, written in self.nodes:
            watched = [key for key in sources if _floating(env[key])] if sources else ()
            if watched:
                tape = tf.GradientTape(watch_accessed_variables=False)
                with tape:
                    tape.watch([env[key] for key in watched])
                    run_node(op, steps, env, operator_events, sync)
                records.append((op, tape, watched, written))
            else:
                run_node(op, steps, env, operator_events, sync)
        return records

    @staticmethod
    def backward(env: dict, records: list, y: str, parameters, timed=(),
                 operator_events=(), sync=None) -> list:
        """The gradients of scalar ``env[y]`` w.r.t. ``parameters`` (keys; ``None`` where
        no path leads from a parameter to ``y``), node by node in reverse order.

        ``timed`` events get ``record_backward_time(op, seconds)`` for each node's
        ``tape.gradient`` call; ``operator_events`` (an executor's
        ``events_in_backward``) are fired around it instead."""
        loss = env[y]
        grads: dict[str, list] = {y: [tf.ones_like(loss)]} if _floating(loss) else {}
        for op, tape, watched, written in reversed(records):
            targets, upstream = [], []
            for key in written:
                contributions = grads.pop(key, None)
                if contributions is not None:
                    targets.append(env[key])
                    upstream.append(contributions[0] if len(contributions) == 1
                                    else tf.add_n(contributions))
            if not targets:
                continue
            sources = [env[key] for key in watched]
            try:
                if op is None:
                    results = _gradient(tape, targets, sources, upstream)
                elif operator_events:
                    if sync:
                        sync()
                    for event in operator_events:
                        event.before_operator(op)
                    results = _gradient(tape, targets, sources, upstream)
                    if sync:
                        sync()
                    for event in operator_events:
                        event.after_operator(op)
                else:
                    if sync:
                        sync()
                    start = perf_counter_ns()
                    results = _gradient(tape, targets, sources, upstream)
                    if sync:
                        sync()
                    seconds = (perf_counter_ns() - start) * 1e-9
                    for event in timed:
                        event.record_backward_time(op, seconds)
            except Exception as exc:
                if op is not None:
                    tag_node(exc, op)
                raise
            for key, g in zip(watched, results):
                if g is not None:
                    if isinstance(g, tf.IndexedSlices):
                        g = tf.convert_to_tensor(g)
                    grads.setdefault(key, []).append(g)
        gradients = []
        for name in parameters:
            contributions = grads.get(name)
            gradients.append(None if not contributions else contributions[0]
                             if len(contributions) == 1 else tf.add_n(contributions))
        return gradients


def _gradient(tape, targets: list, sources: list, upstream: list) -> list:
    """``tape.gradient(targets, sources, output_gradients=upstream)`` for flat lists of
    tensors (``sources`` may hold variables)."""
    if _imperative_grad is None:
        return tape.gradient(targets, sources, output_gradients=upstream)
    handles = [s.handle if isinstance(s, tf.Variable) else s for s in sources]
    return _imperative_grad(tape._tape, targets, handles, output_gradients=upstream,
                            sources_raw=sources, unconnected_gradients=_UNCONNECTED)
