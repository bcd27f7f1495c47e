"""TensorFlowVisitor: the activation family (``deep500/frameworks/families.py``),
activation functions and the softmax family: https://onnx.ai/onnx/operators/. Each is
built from differentiable TensorFlow operations and keeps its input's layout.
"""
from __future__ import annotations

import math

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr, _text
from deep500.frameworks.tensorflow.ops._patterns import unary
from deep500.frameworks.tensorflow.ops._values import _axis, _tf_dtype
from deep500.utils.errors import Deep500Error


class ActivationOps:
    """``visit_<op>`` of the activation family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    visit_relu = unary(tf.nn.relu)
    visit_sigmoid = unary(tf.sigmoid)
    visit_softplus = unary(tf.math.softplus)

    def visit_leakyrelu(self, op, network) -> None:
        """LeakyRelu: x if x >= 0 else alpha·x."""
        alpha = float(op.attributes["alpha"])
        self._unary(op, lambda x: tf.nn.leaky_relu(x, alpha))

    def _softmax(self, op, fn) -> None:
        axis = op.attributes.get("axis")
        axis = -1 if axis is None else int(axis)
        self.emit(lambda x: fn(x, axis=axis), [self.key(op.inputs[0])], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_softmax(self, op, network) -> None:
        """Softmax: https://onnx.ai/onnx/operators/onnx__Softmax.html"""
        self._softmax(op, tf.nn.softmax)

    def visit_logsoftmax(self, op, network) -> None:
        """LogSoftmax: as Softmax, in log space."""
        self._softmax(op, tf.nn.log_softmax)

    def visit_gelu(self, op, network) -> None:
        """Gelu: https://onnx.ai/onnx/operators/onnx__Gelu.html (exact, or the tanh
        approximation)."""
        approximate = _text(op.attributes.get("approximate"), "none")
        if approximate not in ("none", "tanh"):
            raise self.node_error(op, f"approximate={approximate!r} is not 'none' or 'tanh'",
                                  Deep500Error)
        if approximate == "tanh":
            def gelu(x):   # tf.nn.gelu rounds its constants to float32 in float64 too
                inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
                return 0.5 * x * (1 + tf.tanh(inner))
        else:
            def gelu(x):
                return 0.5 * x * (1 + tf.math.erf(x * (1 / math.sqrt(2))))
        self._emit_node(op, gelu)

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
        """Softsign: x / (1 + |x|)."""
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

    def visit_hardmax(self, op, network) -> None:
        """Hardmax: 1 at the first maximum along ``axis``, 0 elsewhere."""
        axis = int(_attr(op, "axis", -1))

        def hardmax(x):
            x = tf.convert_to_tensor(x)
            along = _axis(axis, len(x.shape))
            hit = tf.equal(x, tf.reduce_max(x, axis=along, keepdims=True))
            first = tf.logical_and(hit, tf.equal(tf.cumsum(tf.cast(hit, tf.int32), along), 1))
            return tf.cast(first, _tf_dtype(x))
        self.emit(hardmax, [self.key(op.inputs[0])], op.outputs[0],
                  rank=self.rank(op.inputs[0]))
