"""The sequence family in PyTorch: sequence- and optional-typed values
(https://onnx.ai/onnx/operators/, newest opset).

A sequence is carried as a Python list of tensors and an optional as its value, or None
when it is empty: the module passes both through its slots like tensors, and the
executor feeds and returns them as lists of arrays and None. The tensors in a sequence
keep their autograd history, so gradients flow through SequenceConstruct, SequenceAt,
ConcatFromSequence and the like.
"""
from __future__ import annotations

from deep500.utils.errors import ShapeError, require
from deep500.utils.onnx_interop.sequences import sequence_position

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _position(position, length: int, op_type: str, inserting: bool = False) -> int:
    """A position tensor as a list index (``onnx_interop.sequences``)."""
    return sequence_position(int(position.reshape(-1)[0]), length, op_type, inserting)


def _sequence_at(sequence, position):
    return sequence[_position(position, len(sequence), "SequenceAt")]


def _sequence_insert(sequence, tensor, position=None):
    index = len(sequence) if position is None else _position(
        position, len(sequence), "SequenceInsert", inserting=True)
    return sequence[:index] + [tensor] + sequence[index:]


def _sequence_erase(sequence, position=None):
    index = len(sequence) - 1 if position is None else _position(
        position, len(sequence), "SequenceErase")
    return sequence[:index] + sequence[index + 1:]


def _sequence_length(sequence):
    return torch.tensor(len(sequence), dtype=torch.int64)


def _split_sizes(x, split, axis: int) -> list:
    """SplitToSequence's part sizes: ``split`` a scalar (parts of that size, the last
    one shorter) or a list of sizes; None: parts of 1."""
    length = x.shape[axis]
    if split is None:
        return [1] * length
    if split.dim() == 0:
        size = int(split)
        return [size] * (length // size) + ([length % size] if length % size else [])
    return [int(n) for n in split.tolist()]


def _optional_get_element(value):
    if value is None:
        raise ShapeError("OptionalGetElement: the optional is empty")
    return value


class SequenceOps:
    """``visit_<op>`` of the sequence family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers (and
    ``_bodies.NestedGraphs``) they use."""

    def visit_sequenceempty(self, op, network):
        self._emit(op, lambda: [], [])

    def visit_sequenceconstruct(self, op, network):
        self._emit(op, lambda *tensors: list(tensors))

    def visit_sequenceat(self, op, network):
        self._emit(op, _sequence_at)

    def visit_sequenceinsert(self, op, network):
        self._emit(op, _sequence_insert)

    def visit_sequenceerase(self, op, network):
        self._emit(op, _sequence_erase)

    def visit_sequencelength(self, op, network):
        self._emit(op, _sequence_length)

    def visit_concatfromsequence(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__ConcatFromSequence.html: concatenated
        along ``axis``, or stacked along a new one with ``new_axis``."""
        axis = op.attributes["axis"]
        join = torch.stack if op.attributes.get("new_axis") else torch.cat
        self._emit(op, lambda sequence: join(sequence, axis))

    def visit_splittosequence(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__SplitToSequence.html: without ``split``
        parts of 1 along ``axis``, squeezed unless ``keepdims``."""
        axis = op.attributes.get("axis") or 0
        squeeze = not op.attributes.get("keepdims", 1)

        def split_to_sequence(x, split=None):
            parts = list(torch.split(x, _split_sizes(x, split, axis), axis))
            if split is None and squeeze:
                parts = [part.squeeze(axis) for part in parts]
            return parts
        self._emit(op, split_to_sequence)

    def visit_sequencemap(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__SequenceMap.html: the body runs once per
        element of the input sequence, on that element and, of each additional input,
        its element at the same position (a sequence) or itself (a tensor); each body
        output is collected into a sequence."""
        body = self._body(op, "body")

        def sequence_map(sequence, *others):
            outer = others[len(op.inputs) - 1:]
            others = others[:len(op.inputs) - 1]
            outputs = [[] for _ in body.outputs]
            for i, element in enumerate(sequence):
                formals = [element] + [o[i] if isinstance(o, list) else o for o in others]
                for collected, value in zip(outputs, body.run(formals, outer)):
                    collected.append(value)
            return tuple(outputs) if len(outputs) > 1 else outputs[0]
        self._emit_control(op, sequence_map, list(op.inputs) + body.outer)

    def visit_optional(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Optional.html: the input's value, or an
        empty optional (None) without one."""
        if op.inputs and op.inputs[0]:
            self._emit(op, lambda value: value)
        else:
            self._emit(op, lambda: None, [])

    def visit_optionalhaselement(self, op, network):
        """Whether the (optional) input holds a value: false for an empty optional or an
        omitted input."""
        if not op.inputs or not op.inputs[0]:
            self._emit(op, lambda: torch.tensor(False), [])
            return
        self._emit(op, lambda value: torch.tensor(value is not None))

    def visit_optionalgetelement(self, op, network):
        """The value of a non-empty optional; a tensor or sequence input is itself."""
        self._emit(op, _optional_get_element)


__all__ = ["SequenceOps"]
