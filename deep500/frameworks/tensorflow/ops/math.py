"""TensorFlowVisitor: the math family (``deep500/frameworks/families.py``), elementwise
arithmetic and functions of one number: https://onnx.ai/onnx/operators/. Constant
operands stay NumPy (shape arithmetic costs no TensorFlow operation); every other
closure is built from differentiable TensorFlow operations.
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr
from deep500.frameworks.tensorflow.ops._patterns import broadcasting, unary
from deep500.frameworks.tensorflow.ops._values import _in_wider, _tf_dtype


def _truncated_mod(a, b):
    """C's fmod: the remainder with the sign of the dividend. TensorFlow's TruncateMod
    has no gradient; the result carries d/da = 1, d/db = -trunc(a/b) through terms that
    are exactly zero in value."""
    remainder = tf.stop_gradient(_in_wider(tf.truncatemod, a, b,
                                           types=(tf.int32, tf.int64, tf.float32,
                                                  tf.float64)))
    if not _tf_dtype(remainder).is_floating:
        return remainder
    a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
    quotient = tf.stop_gradient(tf.round((a - remainder) / b))
    return (remainder + (a - tf.stop_gradient(a))
            - quotient * (b - tf.stop_gradient(b)))


class MathOps:
    """``visit_<op>`` of the math family, by operator name, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    visit_abs = unary(tf.abs, np.abs)
    visit_acos = unary(tf.acos)
    visit_acosh = unary(tf.acosh)
    visit_add = broadcasting(tf.add, np.add)
    visit_asin = unary(tf.asin)
    visit_asinh = unary(tf.asinh)
    visit_atan = unary(tf.atan)
    visit_atanh = unary(tf.atanh)
    visit_ceil = unary(tf.math.ceil, np.ceil)

    def visit_clip(self, op, network) -> None:
        """Clip: optional min and max inputs."""
        def clip(x, low=None, high=None):
            if low is not None:
                x = tf.maximum(x, low)
            if high is not None:
                x = tf.minimum(x, high)
            return x
        self._elementwise(op, clip)

    visit_cos = unary(tf.cos)
    visit_cosh = unary(tf.cosh)

    def visit_div(self, op, network) -> None:
        """Div; integer division truncates toward zero (as ONNX Runtime's)."""
        def div_tf(x, y):
            if _tf_dtype(x).is_integer:
                return tf.truncatediv(x, y)
            return tf.math.truediv(x, y)

        def div_np(x, y):
            if np.issubdtype(x.dtype, np.integer):
                return ((np.abs(x) // np.abs(y)) * np.sign(x) * np.sign(y)).astype(x.dtype)
            return x / y
        self._broadcasting(op, div_tf, div_np)

    visit_erf = unary(tf.math.erf)
    visit_exp = unary(tf.exp)
    visit_floor = unary(tf.floor, np.floor)
    visit_log = unary(tf.math.log)
    visit_max = broadcasting(tf.maximum, np.maximum)
    visit_mean = broadcasting(tf.add, np.add, lambda total, n: total / n)
    visit_min = broadcasting(tf.minimum, np.minimum)

    def visit_mod(self, op, network) -> None:
        """Mod: https://onnx.ai/onnx/operators/onnx__Mod.html (fmod=0: the sign of the
        divisor, fmod=1: of the dividend)."""
        fmod = bool(_attr(op, "fmod", 0))

        def mod(a, b):
            if fmod:
                return _truncated_mod(a, b)
            if _tf_dtype(tf.convert_to_tensor(a)) in (tf.float16, tf.bfloat16):
                return _in_wider(tf.math.floormod, a, b)
            return tf.math.floormod(a, b)
        self._elementwise(op, mod)

    visit_mul = broadcasting(tf.multiply, np.multiply)
    visit_neg = unary(tf.negative, np.negative)

    def visit_pow(self, op, network) -> None:
        """Pow: X ** Y in X's type."""
        def pow_tf(x, y):
            if isinstance(y, np.ndarray) and y.shape == () and y == 2:
                return tf.square(x)
            return tf.pow(x, tf.cast(y, _tf_dtype(x)))

        def pow_np(x, y):
            return np.power(x, y).astype(x.dtype)
        self._broadcasting(op, pow_tf, pow_np)

    visit_reciprocal = unary(tf.math.reciprocal)
    # Round: to the nearest integer, halves to even (as ONNX's).
    visit_round = unary(tf.round)

    def visit_sign(self, op, network) -> None:
        """Sign: -1, 0 or 1 (unsigned integers: 0 or 1)."""
        def sign(x):
            if _tf_dtype(x).is_unsigned:
                return tf.cast(tf.not_equal(x, 0), _tf_dtype(x))
            return tf.sign(x)
        self._unary(op, sign)

    visit_sin = unary(tf.sin)
    visit_sinh = unary(tf.sinh)
    visit_sqrt = unary(tf.sqrt)
    visit_sub = broadcasting(tf.subtract, np.subtract)
    visit_sum = broadcasting(tf.add, np.add)
    visit_tan = unary(tf.tan)
    visit_tanh = unary(tf.tanh)
