"""What the TensorFlow operator families read from their operands inside the closures:
static shapes and values (constants stay NumPy so that shape arithmetic stays static),
element types and the types TensorFlow computes with, and casts between them."""
from __future__ import annotations

import numpy as np
import onnx

from deep500.frameworks.tensorflow._tf import tf
from deep500.utils.errors import UnsupportedError

# ONNX's floating element types (TensorProto numbers) TensorFlow computes with.
FLOAT_TYPES = {1: tf.float32, 10: tf.float16, 11: tf.float64, 16: tf.bfloat16}

# Element types TensorFlow computes with (it stores, but cannot cast, float8 and int4).
TF_DTYPE_NAMES = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                            "uint32", "uint64", "float16", "bfloat16", "float32", "float64"))


def tf_supports_dtype(dtype) -> bool:
    """Whether TensorFlow computes with numbers of ``dtype``."""
    return dtype is not None and np.dtype(dtype).name in TF_DTYPE_NAMES


def tf_holds(dtype) -> bool:
    """Whether a TensorFlow tensor holds values of ``dtype``: numbers it computes with,
    and strings (NumPy object arrays of ``str``; ``tf.string``)."""
    return tf_supports_dtype(dtype) or (dtype is not None and np.dtype(dtype) == object)


# -- shapes ------------------------------------------------------------------------------
def _dims(x) -> list:
    """Static dimensions (None where unknown) of a tensor, variable or array."""
    return list(x.shape)


def _shape_list(x) -> list:
    """Dimensions, with a dynamic tensor for those unknown statically."""
    dims = _dims(x)
    if None not in dims:
        return dims
    dynamic = tf.shape(x)
    return [d if d is not None else dynamic[i] for i, d in enumerate(dims)]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# -- values known before the run ----------------------------------------------------------
def _is_np(*values) -> bool:
    return all(isinstance(v, np.ndarray) for v in values)


def _static(value):
    """The value of a constant operand as a NumPy array, or None if only known at run
    time (inside a traced function; a variable's value counts as such)."""
    if value is None or isinstance(value, np.ndarray):
        return value
    return tf.get_static_value(value)


def _ints(value) -> list[int] | None:
    """A shape-like operand's values, or None if only known at run time."""
    static = _static(value)
    return None if static is None else [int(v) for v in np.reshape(static, -1)]


def _known_value(value):
    """The value of an operand as a NumPy array when the closure runs, or None if only
    known at run time. Unlike :func:`_static`, a float initializer (Resize's scales,
    roi) gives its current value, also when traced (a traced function keeps the value it
    was traced with)."""
    if isinstance(value, tf.Variable):
        with tf.init_scope():
            return value.numpy()
    return _static(value)


def _given(value):
    """An optional operand's NumPy value (see :func:`_known_value`); None when omitted
    or empty."""
    value = _known_value(value)
    return None if value is None or np.size(value) == 0 else np.asarray(value)


def _required_ints(value, name: str, visitor, op) -> list:
    """A shape-like operand's values (see :func:`_known_value`), which ``op`` needs when
    its closure runs: an UnsupportedError of the node when only known later."""
    static = _known_value(value)
    if static is None:
        raise visitor.node_error(op, f"the values of {name} are computed at run time "
                                     f"inside a traced function; use mode='eager'",
                                 UnsupportedError)
    return [int(v) for v in np.reshape(static, -1)]


# -- element types -----------------------------------------------------------------------
def _tf_dtype(x):
    return tf.as_dtype(x.dtype)


def _onnx_to_np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def _is_floating(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


def _tensor(x):
    return x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x)


def _like(value, x):
    """``value`` as a tensor in ``x``'s dtype (ONNX lets some parameters differ in
    precision)."""
    value = _tensor(value)
    dtype = _tf_dtype(x)
    return value if value.dtype == dtype else tf.cast(value, dtype)


def _wide(x):
    """``x`` in at least single precision (statistics of half-precision inputs)."""
    return tf.cast(x, tf.float32) if x.dtype in (tf.float16, tf.bfloat16) else x


def _in_wider(fn, x, *rest, types=(tf.float32, tf.float64)):
    """``fn`` on operands cast to a type TensorFlow has a kernel for: float32 for the
    narrower floats, int64 for integers, then cast back."""
    dtype = _tf_dtype(x)
    if dtype in types:
        return fn(x, *rest)
    wide = tf.float32 if dtype.is_floating else tf.int64
    return tf.cast(fn(tf.cast(x, wide), *[tf.cast(r, wide) for r in rest]), dtype)
