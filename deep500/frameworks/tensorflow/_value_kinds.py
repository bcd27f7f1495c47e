"""The values a TensorFlow network carries: ONNX types a value as a tensor, a sequence of
tensors or an optional of either (https://onnx.ai/onnx/repo-docs/IR.html, "Types"). A
tensor is a ``tf.Tensor`` (or a NumPy array for constants), a sequence a Python list of
them, an optional with an element that element, an empty optional None (which is also
what an omitted optional input reads as), as the reference executor carries them.

A traced function takes tensors only: :func:`flatten` turns a run's feeds into tensors and
a structure, :func:`unflatten` turns them back inside the function.
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf

TENSOR = "tensor"


def is_sequence(value) -> bool:
    return isinstance(value, (list, tuple))


def map_tensors(value, fn):
    """``value`` with ``fn`` applied to each of its tensors (a sequence's elements; an
    empty optional stays None)."""
    if value is None:
        return None
    if is_sequence(value):
        return [map_tensors(v, fn) for v in value]
    return fn(value)


def _numpy(tensor) -> np.ndarray:
    if isinstance(tensor, np.ndarray):
        return tensor
    array = np.asarray(tensor.numpy())
    return _decoded(array) if tensor.dtype == tf.string else array


def to_numpy(value):
    """A tensor, variable or array as a NumPy array (0-d stays an array; strings as an
    object array of ``str``, as ONNX's NumPy form has them); a sequence as a list of
    arrays; an empty optional as None."""
    return map_tensors(value, _numpy)


_decoded = np.vectorize(lambda s: s.decode("utf-8") if isinstance(s, bytes) else s,
                        otypes=[object])


def to_tensors(value):
    """A value with each of its tensors as a ``tf.Tensor``."""
    return map_tensors(value, tf.convert_to_tensor)


def flatten(values) -> tuple[tuple, list]:
    """(structure, tensors) of a tuple of values: the structure says per value TENSOR,
    None (an empty optional) or the structures of a sequence's elements."""
    structure, tensors = [], []
    for value in values:
        if value is None:
            structure.append(None)
        elif is_sequence(value):
            inner, flat = flatten(value)
            structure.append(inner)
            tensors += flat
        else:
            structure.append(TENSOR)
            tensors.append(value)
    return tuple(structure), tensors


def unflatten(structure: tuple, tensors) -> list:
    """The values :func:`flatten` took apart."""
    tensors = iter(tensors)

    def rebuild(kinds):
        values = []
        for kind in kinds:
            if kind is None:
                values.append(None)
            elif kind == TENSOR:
                values.append(next(tensors))
            else:
                values.append(rebuild(kind))
        return values
    return rebuild(structure)


def to_arrays(value):
    """A value with each of its tensors as a NumPy array (static inputs of eager runs)."""
    return map_tensors(value, np.asarray)


def freeze(value):
    """A hashable form of a value's arrays: what a traced function is traced for when
    the value decides shapes."""
    if value is None:
        return None
    if is_sequence(value):
        return ("sequence", tuple(freeze(v) for v in value))
    value = np.require(value, requirements="C")   # a 0-d input stays 0-d
    return (value.dtype.str, value.shape, value.tobytes())


def thaw(frozen):
    """The value :func:`freeze` made hashable."""
    if frozen is None:
        return None
    if frozen[0] == "sequence":
        return [thaw(v) for v in frozen[1]]
    dtype, shape, data = frozen
    return np.frombuffer(data, np.dtype(dtype)).reshape(shape)
