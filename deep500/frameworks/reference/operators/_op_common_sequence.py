"""The values a reference network carries besides tensors, and what the sequence
operators share.

ONNX types a value as a tensor, a sequence of tensors or an optional of either
(https://onnx.ai/onnx/repo-docs/IR.html#static-tensor-shapes, "Types"). The reference
carries a tensor as a NumPy array, a sequence as a Python list of arrays, an optional
with an element as that element, and an empty optional as None (which is also what an
omitted optional input reads as: ``OptionalHasElement`` is false for both, as the
operator's specification asks). A reference operator returns a sequence as one element
of its tuple of outputs (``(list,)``), since a bare list would read as its outputs.

Gradients flow through tensors only: a sequence operator on the path from a parameter
to the loss raises (see :class:`SequenceOp`).
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError, UnsupportedError
from deep500.utils.onnx_interop.sequences import sequence_position


def is_sequence(value) -> bool:
    return isinstance(value, (list, tuple))


def as_value(value):
    """``value`` as the reference carries it: arrays stay, lists and tuples become lists
    of values, None stays None, anything else becomes an array."""
    if type(value) is np.ndarray or value is None:
        return value
    if is_sequence(value):
        return [as_value(v) for v in value]
    return np.asarray(value)


def value_nbytes(value) -> int:
    """The bytes of a value's arrays (an empty optional holds none)."""
    if type(value) is np.ndarray:
        return value.nbytes
    if value is None:
        return 0
    if is_sequence(value):
        return sum(value_nbytes(v) for v in value)
    return np.asarray(value).nbytes


def copy_value(value):
    """A copy of ``value`` that shares no array with it."""
    if value is None:
        return None
    if is_sequence(value):
        return [copy_value(v) for v in value]
    return np.array(value, copy=True)


def tensor(value, op_type: str, what: str) -> np.ndarray:
    """``value`` where a tensor is expected, or a ShapeError naming the operator."""
    if value is None or is_sequence(value):
        kind = "an empty optional" if value is None else "a sequence"
        raise ShapeError(f"{op_type}: {what} must be a tensor, got {kind}")
    return np.asarray(value)


def sequence(value, op_type: str, what: str = "the input sequence") -> list:
    """``value`` where a sequence is expected, or a ShapeError naming the operator."""
    if not is_sequence(value):
        kind = "an empty optional" if value is None else "a tensor"
        raise ShapeError(f"{op_type}: {what} must be a sequence, got {kind}")
    return list(value)


def position(value, length: int, op_type: str, inserting: bool = False) -> int:
    """A sequence position (a one-element integer tensor, negative counting from the
    end) as an index in ``[0, length)``, or ``[0, length]`` when ``inserting``."""
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "iu":
        raise ShapeError(f"{op_type}: position must be a one-element integer tensor, got "
                         f"shape {list(array.shape)} and dtype {array.dtype}")
    return sequence_position(int(array.reshape(-1)[0]), length, op_type, inserting)


class SequenceOp(ReferenceOp):
    """An operator on sequence or optional values. Gradients do not flow through a
    sequence, so its backward gives no gradient where none arrives and raises where one
    would have to pass through it."""

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if any(g is not None for g in grads):
            raise UnsupportedError(
                f"{self.op_type}: the reference executor differentiates tensors only, and "
                f"this node carries a sequence on the path from a parameter to the loss; "
                f"build the loss without sequence operators on that path")
        return [None] * len(fwd_inputs)


class PassThrough(SequenceOp):
    """Optional and OptionalGetElement: the output is the input. A tensor's gradient
    passes back unchanged; a sequence's is refused as :class:`SequenceOp` refuses it."""

    def backward(self, grads, fwd_inputs, fwd_outputs):
        value = fwd_inputs[0] if fwd_inputs else None
        if value is None or is_sequence(value) or grads[0] is None:
            return super().backward(grads, fwd_inputs, fwd_outputs)
        return [np.array(grads[0], copy=True)]
