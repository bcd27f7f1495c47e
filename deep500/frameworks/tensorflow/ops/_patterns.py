"""The ways a TensorFlow operator family emits a node, shared by the families: an
elementwise function of one tensor kept in that tensor's layout, a broadcasting function
folded over the inputs (in channels-last where the inputs are), an operator computed in
channels-last, and a closure over every input and output of the node. They build on the
visitor's ``emit``, ``key``, ``aligned_key`` and ``static_key``
(``deep500.frameworks.tensorflow.visitor``).

:func:`unary` and :func:`broadcasting` make a ``visit_<op>`` of one line for operators
that are one TensorFlow function: ``visit_exp = unary(tf.exp)``.
"""
from __future__ import annotations

import functools

import numpy as np

from deep500.frameworks.tensorflow._layout import (CHANNELS_LAST, ONNX_LAYOUT,
                                                   to_channels_last, to_onnx_layout)
from deep500.frameworks.tensorflow.ops._values import _is_np


def unary(tf_fn, np_fn=None):
    """A ``visit_<op>`` computing ``tf_fn`` elementwise (``np_fn`` on a constant input,
    so that constant folding stays in NumPy)."""
    def visit(self, op, network) -> None:
        self._unary(op, tf_fn, np_fn)
    visit.__doc__ = f"Elementwise {getattr(tf_fn, '__name__', tf_fn)}."
    return visit


def broadcasting(tf_fn, np_fn=None, finish=None):
    """A ``visit_<op>`` folding the binary ``tf_fn`` over the broadcast inputs (``np_fn``,
    if given, when all are constants); ``finish(result, count)`` completes the result
    (Mean)."""
    def visit(self, op, network) -> None:
        self._broadcasting(op, tf_fn, np_fn, finish)
    visit.__doc__ = f"Broadcasting {getattr(tf_fn, '__name__', tf_fn)} over the inputs."
    return visit


class OperatorPatterns:
    """Mixed into :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _same_layout(self, op, fn) -> None:
        """An operator computing each element from the same element of its one tensor
        input (other inputs are attributes-like scalars)."""
        x = op.inputs[0]
        layout = self.layout(x) if self.propagate_layout else ONNX_LAYOUT
        inputs = [self.key(x, layout)] + [self.key(n) for n in op.inputs[1:]]
        outputs = op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)
        self.emit(fn, inputs, outputs, layout, self.rank(x))

    def _unary(self, op, tf_fn, np_fn=None) -> None:
        if np_fn is None:
            self._same_layout(op, tf_fn)
            return

        def unary_fn(x):
            return np.asarray(np_fn(x)) if isinstance(x, np.ndarray) else tf_fn(x)
        self._same_layout(op, unary_fn)

    def _elementwise(self, op, fn, names=None) -> None:
        """A broadcasting elementwise operator over ``names`` (default: all inputs)."""
        names = list(op.inputs if names is None else names)
        rank = self._channels_last_rank(names)
        if rank is None:
            ranks = [self.rank(n) for n in names if n]
            self.emit(fn, [self.key(n) for n in names], op.outputs[0], ONNX_LAYOUT,
                      max(ranks) if ranks and None not in ranks else None)
        else:
            self.emit(fn, [self.aligned_key(n, rank) for n in names], op.outputs[0],
                      CHANNELS_LAST, rank)

    def _broadcasting(self, op, tf_fn, np_fn=None, finish=None) -> None:
        """``tf_fn`` folded over the inputs; NumPy's ``np_fn``, if given, when all are
        constants."""
        def fold(*xs):
            if np_fn is not None and _is_np(*xs):
                result = functools.reduce(np_fn, xs)
                return np.asarray(finish(result, len(xs)) if finish else result)
            result = functools.reduce(tf_fn, xs)
            return finish(result, len(xs)) if finish else result
        self._elementwise(op, fold)

    def _channels_last_op(self, op, core, n_outputs: int = 1) -> None:
        """An operator computed in channels-last by ``core(x, *rest)`` on input 0."""
        x = op.inputs[0]
        rank = self.rank(x)
        rest = [self.key(n) for n in op.inputs[1:]]
        outputs = op.outputs[0] if n_outputs == 1 else list(op.outputs[:n_outputs])
        if rank is not None and rank >= 3:
            self.emit(core, [self.key(x, CHANNELS_LAST)] + rest, outputs, CHANNELS_LAST, rank)
            return
        if rank is not None:
            self.emit(core, [self.key(x)] + rest, outputs, ONNX_LAYOUT, rank)
            return

        def converted(x, *rest):   # rank known only at run time
            if len(x.shape) < 3:
                return core(x, *rest)
            result = core(to_channels_last(x), *rest)
            if n_outputs == 1:
                return to_onnx_layout(result)
            return (to_onnx_layout(result[0]),) + tuple(result[1:])
        self.emit(converted, [self.key(x)] + rest, outputs)

    def _emit_node(self, op, fn, static=()) -> None:
        """Emit ``fn`` over every input of ``op`` (omitted ones as None; those indexed
        in ``static`` are read at trace time) producing every output (a tuple when
        several)."""
        keys = [self.static_key(n) if i in static and n else self.key(n)
                for i, n in enumerate(op.inputs)]
        outputs = op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)
        self.emit(fn, keys, outputs)

    def _axes_input(self, op):
        """(axes, or None; the name of a runtime axes tensor, or None): the second
        input."""
        name = op.inputs[1] if len(op.inputs) > 1 else ""
        if not name:
            return None, None
        value = self._value(name)
        if value is not None:
            return [int(a) for a in np.reshape(value, -1)], None
        self.static_key(name)
        return None, name
