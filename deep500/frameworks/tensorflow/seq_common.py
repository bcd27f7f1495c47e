"""What the TensorFlow visitor's mixins for the attention, normalization, recurrent,
resampling and window operators share (issue 19): reading operands whose values decide
shapes, dtype helpers, and node errors that closures raise at run time."""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError

_FLOAT_TYPES = {1: tf.float32, 10: tf.float16, 11: tf.float64, 16: tf.bfloat16}


def _static(value):
    """The value of an operand as a NumPy array, or None if only known at run time."""
    if value is None or isinstance(value, np.ndarray):
        return value
    if isinstance(value, tf.Variable):
        # A float initializer (Resize's scales, roi): its value when the closure runs or
        # is traced (a traced function keeps the value it was traced with).
        with tf.init_scope():
            return value.numpy()
    return tf.get_static_value(value)


def _given(value):
    """An optional operand's NumPy value; None when omitted or empty."""
    value = _static(value)
    return None if value is None or np.size(value) == 0 else np.asarray(value)


def _tensor(x):
    return x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x)


def _like(value, x):
    """``value`` as a tensor in ``x``'s dtype."""
    value = _tensor(value)
    return value if value.dtype == x.dtype else tf.cast(value, x.dtype)


def _wide(x):
    """``x`` in at least single precision (statistics of half-precision inputs)."""
    return tf.cast(x, tf.float32) if x.dtype in (tf.float16, tf.bfloat16) else x


def _text(value, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _ints(value, name: str, visitor, op) -> list:
    """A shape-like operand's values, known when the closure runs."""
    static = _static(value)
    if static is None:
        raise visitor._node_error(op, f"the values of {name} are computed at run time "
                                      f"inside a traced function; use mode='eager'",
                                  UnsupportedError)
    return [int(v) for v in np.reshape(static, -1)]


class NodeOps:
    """Plumbing of the operator mixins, on top of the visitor's ``emit``, ``key`` and
    ``static_key``."""

    def _node_error(self, op, message: str, error=ShapeError):
        """An error of node ``op`` (closures raise it at run time, when the visitor's
        current node is another)."""
        return error(f"{self.framework}: node '{op.name}' ({op.op_type}) of network "
                     f"'{self.network.name}': {message}")

    def _emit_node(self, op, fn, static=()) -> None:
        """Emit ``fn`` over every input of ``op`` (omitted ones as None; those indexed
        in ``static`` are read at trace time) producing every output (a tuple when
        several)."""
        keys = [self.static_key(n) if i in static and n else self.key(n)
                for i, n in enumerate(op.inputs)]
        outputs = op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)
        self.emit(fn, keys, outputs)

    def _stash(self, op):
        """The dtype of stage one of a normalization (``stash_type``, default float)."""
        value = op.attributes.get("stash_type")
        value = 1 if value is None else int(value)
        if value not in _FLOAT_TYPES:
            raise self._node_error(op, f"stash_type={value} is not a float type (1, 10, 11 or "
                                   f"16)", Deep500Error)
        return _FLOAT_TYPES[value]
