"""Helpers shared by the tensor_* operator modules of the TensorFlow executor."""
from __future__ import annotations

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._tf_common import _tf_dtype


def _attr(op, name, default):
    value = op.attributes.get(name)
    return default if value is None else value


def _in_wider(fn, x, *rest, types=(tf.float32, tf.float64)):
    """``fn`` on operands cast to a type TensorFlow has a kernel for: float32 for the
    narrower floats, int64 for integers, then cast back."""
    dtype = _tf_dtype(x)
    if dtype in types:
        return fn(x, *rest)
    wide = tf.float32 if dtype.is_floating else tf.int64
    return tf.cast(fn(tf.cast(x, wide), *[tf.cast(r, wide) for r in rest]), dtype)
