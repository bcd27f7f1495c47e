"""TensorFlowVisitor methods for the elementwise math, activations, logic and bit
operators of the ONNX operator set (issue 19), part of
:class:`deep500.frameworks.tensorflow.ops_tensor.TensorOps`. Each follows
https://onnx.ai/onnx/operators/ and builds its closure from differentiable TensorFlow
operations.
"""
from __future__ import annotations

import numpy as np
import onnx

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._tf_common import _tf_dtype
from deep500.frameworks.tensorflow.tensor_common import _attr, _in_wider


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
    """``visit_<op>`` methods of the elementwise math, activations, logic and bit
    operators, part of :class:`TensorOps`."""

    def visit_sin(self, op, network) -> None:
        self._unary(op, tf.sin)

    def visit_cos(self, op, network) -> None:
        self._unary(op, tf.cos)

    def visit_tan(self, op, network) -> None:
        self._unary(op, tf.tan)

    def visit_asin(self, op, network) -> None:
        self._unary(op, tf.asin)

    def visit_acos(self, op, network) -> None:
        self._unary(op, tf.acos)

    def visit_atan(self, op, network) -> None:
        self._unary(op, tf.atan)

    def visit_sinh(self, op, network) -> None:
        self._unary(op, tf.sinh)

    def visit_cosh(self, op, network) -> None:
        self._unary(op, tf.cosh)

    def visit_asinh(self, op, network) -> None:
        self._unary(op, tf.asinh)

    def visit_acosh(self, op, network) -> None:
        self._unary(op, tf.acosh)

    def visit_atanh(self, op, network) -> None:
        self._unary(op, tf.atanh)

    def visit_sign(self, op, network) -> None:
        """Sign: -1, 0 or 1 (unsigned integers: 0 or 1)."""
        def sign(x):
            if _tf_dtype(x).is_unsigned:
                return tf.cast(tf.not_equal(x, 0), _tf_dtype(x))
            return tf.sign(x)
        self._unary(op, sign)

    def visit_round(self, op, network) -> None:
        """Round: to the nearest integer, halves to even (as tf.round)."""
        self._unary(op, tf.round)

    def visit_isnan(self, op, network) -> None:
        self._unary(op, tf.math.is_nan)

    def visit_isinf(self, op, network) -> None:
        """IsInf: https://onnx.ai/onnx/operators/onnx__IsInf.html"""
        negative = bool(_attr(op, "detect_negative", 1))
        positive = bool(_attr(op, "detect_positive", 1))

        def is_inf(x):
            infinite = tf.math.is_inf(x)
            if negative and positive:
                return infinite
            if not (negative or positive):
                return tf.zeros_like(infinite)
            return tf.logical_and(infinite, x > 0 if positive else x < 0)
        self._unary(op, is_inf)

    def visit_elu(self, op, network) -> None:
        """Elu: x if x > 0 else alpha·(exp(x) - 1)."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._unary(op, lambda x: tf.where(x > 0, x, alpha * tf.math.expm1(tf.minimum(x, 0))))

    def visit_selu(self, op, network) -> None:
        """Selu: gamma·(x if x > 0 else alpha·(exp(x) - 1))."""
        alpha = float(_attr(op, "alpha", 1.67326319217681884765625))
        gamma = float(_attr(op, "gamma", 1.05070102214813232421875))
        self._unary(op, lambda x: gamma * tf.where(
            x > 0, x, alpha * tf.math.expm1(tf.minimum(x, 0))))

    def visit_celu(self, op, network) -> None:
        """Celu: max(0, x) + min(0, alpha·(exp(x/alpha) - 1))."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._unary(op, lambda x: tf.nn.relu(x) + alpha * tf.math.expm1(
            tf.minimum(x, 0) / alpha))

    def visit_hardsigmoid(self, op, network) -> None:
        """HardSigmoid: max(0, min(1, alpha·x + beta))."""
        alpha = float(_attr(op, "alpha", 0.2))
        beta = float(_attr(op, "beta", 0.5))
        self._unary(op, lambda x: tf.clip_by_value(alpha * x + beta, 0, 1))

    def visit_hardswish(self, op, network) -> None:
        """HardSwish: x·max(0, min(1, x/6 + 1/2))."""
        self._unary(op, lambda x: x * tf.clip_by_value(x / 6 + 0.5, 0, 1))

    def visit_softsign(self, op, network) -> None:
        self._unary(op, lambda x: x / (1 + tf.abs(x)))

    def visit_thresholdedrelu(self, op, network) -> None:
        """ThresholdedRelu: x if x > alpha else 0."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._unary(op, lambda x: tf.where(x > alpha, x, tf.zeros_like(x)))

    def visit_shrink(self, op, network) -> None:
        """Shrink: x + bias if x < -lambd, x - bias if x > lambd, else 0."""
        bias = float(_attr(op, "bias", 0.0))
        lambd = float(_attr(op, "lambd", 0.5))

        def shrink(x):
            dtype = _tf_dtype(x)
            b = tf.cast(bias, dtype)
            low, high = tf.cast(-lambd, tf.float64), tf.cast(lambd, tf.float64)
            wide = tf.cast(x, tf.float64)
            return tf.where(wide < low, x + b, tf.where(wide > high, x - b, tf.zeros_like(x)))
        self._unary(op, shrink)

    def visit_mish(self, op, network) -> None:
        """Mish: x·tanh(softplus(x)) (https://arxiv.org/abs/1908.08681)."""
        self._unary(op, lambda x: x * tf.tanh(tf.math.softplus(x)))

    def visit_swish(self, op, network) -> None:
        """Swish: x·sigmoid(alpha·x)."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._unary(op, lambda x: x * tf.sigmoid(alpha * x))

    def visit_prelu(self, op, network) -> None:
        """PRelu: slope·x where x < 0 (slope broadcast to x)."""
        def prelu(x, slope):
            return tf.where(x < 0, tf.cast(slope, _tf_dtype(x)) * x, x)
        self._elementwise(op, prelu)

    def visit_swiglu(self, op, network) -> None:
        """SwiGLU: Swish_alpha(A)·B (https://onnx.ai/onnx/operators/onnx__SwiGLU.html)."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._elementwise(op, lambda a, b: a * tf.sigmoid(alpha * a) * b)

    def visit_xor(self, op, network) -> None:
        self._elementwise(op, tf.math.logical_xor)

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

    def visit_bitshift(self, op, network) -> None:
        """BitShift: https://onnx.ai/onnx/operators/onnx__BitShift.html"""
        direction = _attr(op, "direction", "")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in ("LEFT", "RIGHT"):
            raise self._unsupported(f"BitShift direction must be 'LEFT' or 'RIGHT', got "
                                    f"{direction!r}", "fix the node's attribute")
        left = direction == "LEFT"

        def bit_shift(x, y):
            x = tf.convert_to_tensor(x)
            y = tf.cast(y, _tf_dtype(x))
            bits = _tf_dtype(x).size * 8
            # Shifts by a negative amount or by the width or more: every bit shifted out
            # (an arithmetic right shift leaves the sign).
            out = tf.logical_or(y < 0, y >= bits)
            safe = tf.where(out, tf.zeros_like(y), y)
            if left:
                return tf.where(out, tf.zeros_like(x), tf.bitwise.left_shift(x, safe))
            fill = tf.where(x < 0, tf.cast(-1, _tf_dtype(x)), tf.zeros_like(x))
            return tf.where(out, fill, tf.bitwise.right_shift(x, safe))
        self._elementwise(op, bit_shift)

    def visit_bitcast(self, op, network) -> None:
        """BitCast: the input's bits read as element type ``to`` of the same width
        (https://onnx.ai/onnx/operators/onnx__BitCast.html)."""
        target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(op.attributes["to"])))
        source = self.network.dtypes.get(op.inputs[0])
        if source is not None and np.dtype(source).itemsize != target.itemsize:
            raise self._unsupported(f"BitCast from {np.dtype(source).name} to {target.name} "
                                    f"changes the element width", "cast to a type of "
                                    f"{np.dtype(source).itemsize * 8} bits")
        tf_target = tf.as_dtype(target)

        def bit_cast(x):
            x = tf.convert_to_tensor(x)
            if _tf_dtype(x) == tf_target:
                return x
            if tf_target == tf.bool:      # a byte of 0 or 1
                return tf.not_equal(x, 0)
            if _tf_dtype(x) == tf.bool:
                return tf.bitcast(tf.cast(x, tf.uint8), tf_target)
            return tf.bitcast(x, tf_target)
        self._unary(op, bit_cast)

    def visit_bitwiseand(self, op, network) -> None:
        self._elementwise(op, tf.bitwise.bitwise_and)

    def visit_bitwiseor(self, op, network) -> None:
        self._elementwise(op, tf.bitwise.bitwise_or)

    def visit_bitwisexor(self, op, network) -> None:
        self._elementwise(op, tf.bitwise.bitwise_xor)

    def visit_bitwisenot(self, op, network) -> None:
        self._unary(op, tf.bitwise.invert)
