"""TensorFlowVisitor: elementwise arithmetic, unary functions, Clip, variadic
Sum/Min/Max/Mean, comparisons, logic and Where. https://onnx.ai/onnx/operators/
"""
from __future__ import annotations

import functools

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._tf_common import _is_np, _tf_dtype


class ElementwiseOps:
    """``visit_<op>`` of the elementwise operators, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`, whose helpers they use
    (``emit``, ``key``, ``rank``, ``layout``, ``_value``, ``_unsupported``, ...)."""

    def _binary(self, op, tf_fn, np_fn) -> None:
        def binary(x, y):
            if _is_np(x, y):
                return np.asarray(np_fn(x, y))
            return tf_fn(x, y)
        self._elementwise(op, binary)

    def visit_add(self, op, network) -> None:
        self._binary(op, tf.add, np.add)

    def visit_sub(self, op, network) -> None:
        self._binary(op, tf.subtract, np.subtract)

    def visit_mul(self, op, network) -> None:
        self._binary(op, tf.multiply, np.multiply)

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
        self._binary(op, div_tf, div_np)

    def visit_pow(self, op, network) -> None:
        """Pow: X ** Y in X's type."""
        def pow_tf(x, y):
            if isinstance(y, np.ndarray) and y.shape == () and y == 2:
                return tf.square(x)
            return tf.pow(x, tf.cast(y, _tf_dtype(x)))

        def pow_np(x, y):
            return np.power(x, y).astype(x.dtype)
        self._binary(op, pow_tf, pow_np)

    def _unary(self, op, tf_fn, np_fn=None) -> None:
        if np_fn is None:
            self._same_layout(op, tf_fn)
            return

        def unary(x):
            return np.asarray(np_fn(x)) if isinstance(x, np.ndarray) else tf_fn(x)
        self._same_layout(op, unary)

    def visit_sqrt(self, op, network) -> None:
        self._unary(op, tf.sqrt)

    def visit_exp(self, op, network) -> None:
        self._unary(op, tf.exp)

    def visit_log(self, op, network) -> None:
        self._unary(op, tf.math.log)

    def visit_neg(self, op, network) -> None:
        self._unary(op, tf.negative, np.negative)

    def visit_abs(self, op, network) -> None:
        self._unary(op, tf.abs, np.abs)

    def visit_erf(self, op, network) -> None:
        self._unary(op, tf.math.erf)

    def visit_reciprocal(self, op, network) -> None:
        self._unary(op, tf.math.reciprocal)

    def visit_floor(self, op, network) -> None:
        self._unary(op, tf.floor, np.floor)

    def visit_ceil(self, op, network) -> None:
        self._unary(op, tf.math.ceil, np.ceil)

    def visit_relu(self, op, network) -> None:
        self._unary(op, tf.nn.relu)

    def visit_leakyrelu(self, op, network) -> None:
        alpha = float(op.attributes["alpha"])
        self._unary(op, lambda x: tf.nn.leaky_relu(x, alpha))

    def visit_sigmoid(self, op, network) -> None:
        self._unary(op, tf.sigmoid)

    def visit_tanh(self, op, network) -> None:
        self._unary(op, tf.tanh)

    def visit_softplus(self, op, network) -> None:
        self._unary(op, tf.math.softplus)

    def visit_not(self, op, network) -> None:
        self._unary(op, tf.logical_not, np.logical_not)

    def visit_clip(self, op, network) -> None:
        """Clip: optional min and max inputs."""
        def clip(x, low=None, high=None):
            if low is not None:
                x = tf.maximum(x, low)
            if high is not None:
                x = tf.minimum(x, high)
            return x
        self._elementwise(op, clip)

    def _variadic(self, op, tf_fn, np_fn, finish=None) -> None:
        def variadic(*xs):
            if _is_np(*xs):
                result = functools.reduce(np_fn, xs)
                return np.asarray(finish(result, len(xs)) if finish else result)
            result = functools.reduce(tf_fn, xs)
            return finish(result, len(xs)) if finish else result
        self._elementwise(op, variadic)

    def visit_sum(self, op, network) -> None:
        self._variadic(op, tf.add, np.add)

    def visit_min(self, op, network) -> None:
        self._variadic(op, tf.minimum, np.minimum)

    def visit_max(self, op, network) -> None:
        self._variadic(op, tf.maximum, np.maximum)

    def visit_mean(self, op, network) -> None:
        self._variadic(op, tf.add, np.add, lambda total, n: total / n)

    def _comparison(self, op, tf_fn, np_fn) -> None:
        def compare(x, y):
            return np.asarray(np_fn(x, y)) if _is_np(x, y) else tf_fn(x, y)
        self._elementwise(op, compare)

    def visit_equal(self, op, network) -> None:
        self._comparison(op, tf.equal, np.equal)

    def visit_less(self, op, network) -> None:
        self._comparison(op, tf.less, np.less)

    def visit_greater(self, op, network) -> None:
        self._comparison(op, tf.greater, np.greater)

    def visit_lessorequal(self, op, network) -> None:
        self._comparison(op, tf.less_equal, np.less_equal)

    def visit_greaterorequal(self, op, network) -> None:
        self._comparison(op, tf.greater_equal, np.greater_equal)

    def visit_and(self, op, network) -> None:
        self._comparison(op, tf.logical_and, np.logical_and)

    def visit_or(self, op, network) -> None:
        self._comparison(op, tf.logical_or, np.logical_or)

    def visit_where(self, op, network) -> None:
        """Where: condition ? X : Y, broadcasting."""
        def where(condition, x, y):
            if _is_np(condition, x, y):
                return np.where(condition, x, y)
            return tf.where(condition, x, y)
        self._elementwise(op, where)
