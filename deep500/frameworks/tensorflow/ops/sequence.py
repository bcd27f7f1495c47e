"""TensorFlowVisitor: the sequence family (``deep500/frameworks/families.py``), sequence-
and optional-typed values: https://onnx.ai/onnx/operators/ (SequenceEmpty,
SequenceConstruct, SequenceAt, SequenceInsert, SequenceErase, SequenceLength,
ConcatFromSequence, SplitToSequence, SequenceMap, Optional, OptionalGetElement,
OptionalHasElement).

A sequence is a Python list of tensors, an empty optional None
(``deep500/frameworks/tensorflow/_value_kinds.py``), so the operators move tensors between
lists and TensorFlow computes only where tensors are joined or split (ConcatFromSequence,
SplitToSequence); gradients flow through the tensors a list holds. Positions and lengths
are read when the closure runs (in a traced function: when they are constants or come
from shapes, as a Loop's iteration counter does).
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._value_kinds import is_sequence
from deep500.frameworks.tensorflow.ops._body import Body
from deep500.frameworks.tensorflow.ops._values import _axis, _required_ints
from deep500.utils.errors import Deep500Error, ShapeError


class SequenceOps:
    """``visit_<op>`` of the sequence family, by operator name, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _sequence(self, op, value, what: str = "the input sequence") -> list:
        if not is_sequence(value):
            kind = "an empty optional" if value is None else "a tensor"
            raise self.node_error(op, f"{what} must be a sequence, got {kind}", ShapeError)
        return list(value)

    def _position(self, op, value, length: int, inserting: bool = False) -> int:
        """A position (one integer, negative counting from the end) as an index in
        [0, length), or [0, length] when ``inserting``."""
        values = _required_ints(value, "position", self, op)
        high = length if inserting else length - 1
        if len(values) != 1 or not -length <= values[0] <= high:
            raise self.node_error(op, f"position {values} must be one integer in "
                                      f"[{-length}, {high}] for a sequence of {length} "
                                      f"tensors", ShapeError)
        return values[0] + length if values[0] < 0 else values[0]

    def visit_concatfromsequence(self, op, network) -> None:
        """ConcatFromSequence: the sequence's tensors joined along ``axis``, or stacked
        along a new axis with ``new_axis``."""
        axis = int(op.attributes.get("axis"))
        new_axis = bool(op.attributes.get("new_axis") or 0)

        def concat_from_sequence(sequence):
            tensors = self._sequence(op, sequence)
            if not tensors:
                raise self.node_error(op, "the input sequence is empty", ShapeError)
            rank = len(tensors[0].shape) + (1 if new_axis else 0)
            if not -rank <= axis < rank:
                raise self.node_error(op, f"axis={axis} is outside [{-rank}, {rank - 1}]",
                                      ShapeError)
            if new_axis:
                return tf.stack(tensors, _axis(axis, rank))
            return tf.concat(tensors, _axis(axis, rank))
        self._emit_node(op, concat_from_sequence)

    def visit_optional(self, op, network) -> None:
        """Optional: an optional holding the input, or an empty one of the type the
        ``type`` attribute names."""
        if not (op.inputs and op.inputs[0]) and op.attributes.get("type") is None:
            raise self.node_error(op, "without an input, the node must name the empty "
                                      "optional's element type (attribute 'type')",
                                  Deep500Error)
        self._emit_node(op, lambda value=None: value)

    def visit_optionalgetelement(self, op, network) -> None:
        """OptionalGetElement: the element of an optional (a tensor or sequence input
        is its own element); an empty optional is an error."""
        def optional_get_element(value):
            if value is None:
                raise self.node_error(op, "the optional is empty", ShapeError)
            return value
        self._emit_node(op, optional_get_element)

    def visit_optionalhaselement(self, op, network) -> None:
        """OptionalHasElement: whether the optional holds an element (false for an
        omitted input)."""
        self._emit_node(op, lambda value=None: np.asarray(value is not None))

    def visit_sequenceat(self, op, network) -> None:
        """SequenceAt: the tensor at ``position``."""
        def sequence_at(sequence, position):
            tensors = self._sequence(op, sequence)
            return tensors[self._position(op, position, len(tensors))]
        self._emit_node(op, sequence_at, static=(1,))

    def visit_sequenceconstruct(self, op, network) -> None:
        """SequenceConstruct: the inputs, in order, as a sequence."""
        self._emit_node(op, lambda *tensors: list(tensors))

    def visit_sequenceempty(self, op, network) -> None:
        """SequenceEmpty: a sequence of no tensors."""
        self._emit_node(op, lambda: [])

    def visit_sequenceerase(self, op, network) -> None:
        """SequenceErase: the sequence without the tensor at ``position`` (default: the
        last)."""
        def sequence_erase(sequence, position=None):
            tensors = self._sequence(op, sequence)
            if not tensors:
                raise self.node_error(op, "the input sequence is empty", ShapeError)
            index = (len(tensors) - 1 if position is None
                     else self._position(op, position, len(tensors)))
            return tensors[:index] + tensors[index + 1:]
        self._emit_node(op, sequence_erase, static=(1,))

    def visit_sequenceinsert(self, op, network) -> None:
        """SequenceInsert: the sequence with ``tensor`` inserted at ``position``
        (default: at the end)."""
        def sequence_insert(sequence, tensor, position=None):
            tensors = self._sequence(op, sequence)
            index = (len(tensors) if position is None
                     else self._position(op, position, len(tensors), inserting=True))
            return tensors[:index] + [tensor] + tensors[index:]
        self._emit_node(op, sequence_insert, static=(2,))

    def visit_sequencelength(self, op, network) -> None:
        """SequenceLength: the number of tensors, an int64 scalar (NumPy: a list's
        length is known when the closure runs)."""
        self._emit_node(op, lambda sequence: np.asarray(len(self._sequence(op, sequence)),
                                                        np.int64))

    def visit_sequencemap(self, op, network) -> None:
        """SequenceMap: the ``body`` graph applied at each position of the input
        sequence; an additional sequence input gives the body its tensor at the same
        position, a tensor input is given whole. Each body output becomes a sequence."""
        body = Body(self, op, "body")
        n_inputs = len(op.inputs)
        if len(body.inputs) != n_inputs:
            raise self.node_error(op, f"the body takes {len(body.inputs)} inputs, the node "
                                      f"passes {n_inputs}; fix the model", Deep500Error)
        outer = list(op.implicit_inputs)

        def sequence_map(first, *rest):
            others, scope = rest[:n_inputs - 1], dict(zip(outer, rest[n_inputs - 1:]))
            first = self._sequence(op, first)
            for k, other in enumerate(others):
                if is_sequence(other) and len(other) != len(first):
                    raise self.node_error(op, f"additional input {k} is a sequence of "
                                              f"{len(other)} tensors, the input sequence "
                                              f"has {len(first)}", ShapeError)
            results = [[] for _ in body.outputs]
            for i, element in enumerate(first):
                values = [element] + [v[i] if is_sequence(v) else v for v in others]
                for collected, value in zip(results, body(values, scope)):
                    collected.append(value)
            return results[0] if len(results) == 1 else tuple(results)
        keys = [self.key(n) for n in op.inputs] + [self.key(n) for n in outer]
        self.emit(sequence_map, keys, op.outputs[0] if len(op.outputs) == 1
                  else list(op.outputs))

    def visit_splittosequence(self, op, network) -> None:
        """SplitToSequence: the input split along ``axis`` into parts of the lengths of
        a 1-D ``split``, into chunks of a scalar ``split`` (the last may be shorter), or,
        without ``split``, into slices of length 1, whose axis is dropped where
        ``keepdims`` is 0."""
        axis = int(op.attributes.get("axis") or 0)
        keepdims = op.attributes.get("keepdims")
        keepdims = True if keepdims is None else bool(keepdims)

        def split_to_sequence(x, split=None):
            x = tf.convert_to_tensor(x)
            rank = len(x.shape)
            if not -rank <= axis < rank:
                raise self.node_error(op, f"axis={axis} is outside [{-rank}, {rank - 1}]",
                                      ShapeError)
            along = _axis(axis, rank)
            extent = x.shape[along]
            if extent is None:
                raise self.node_error(op, "the split axis has a length known only at run "
                                          "time; use mode='eager'", Deep500Error)
            lengths = self._split_lengths(op, split, extent)
            if not lengths:
                return []
            parts = tf.split(x, lengths, along)
            if split is None and not keepdims:
                parts = [tf.squeeze(part, along) for part in parts]
            return list(parts)
        self._emit_node(op, split_to_sequence, static=(1,))

    def _split_lengths(self, op, split, extent: int) -> list:
        if split is None:
            return [1] * extent
        lengths = _required_ints(split, "split", self, op)
        if np.ndim(split) == 0:
            chunk = lengths[0]
            if chunk <= 0:
                raise self.node_error(op, f"split={chunk} must be positive", ShapeError)
            return [min(chunk, extent - start) for start in range(0, extent, chunk)]
        if sum(lengths) != extent or any(n < 0 for n in lengths):
            raise self.node_error(op, f"split {lengths} must be non-negative lengths "
                                      f"summing to the axis' extent {extent}", ShapeError)
        return lengths
