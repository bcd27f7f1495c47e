"""TensorFlowVisitor: the logic family (``deep500/frameworks/families.py``), comparison,
logical and bitwise operators and Where: https://onnx.ai/onnx/operators/. Constant
operands of comparisons and logic stay NumPy.
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr, _text
from deep500.frameworks.tensorflow.ops._patterns import broadcasting, unary
from deep500.frameworks.tensorflow.ops._values import _is_np, _tf_dtype


class LogicOps:
    """``visit_<op>`` of the logic family, by operator name, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    visit_and = broadcasting(tf.logical_and, np.logical_and)

    def visit_bitshift(self, op, network) -> None:
        """BitShift: https://onnx.ai/onnx/operators/onnx__BitShift.html"""
        direction = _text(op.attributes.get("direction"), "")
        if direction not in ("LEFT", "RIGHT"):
            raise self.node_error(op, f"BitShift direction must be 'LEFT' or 'RIGHT', got "
                                      f"{direction!r}; fix the node's attribute")
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

    visit_bitwiseand = broadcasting(tf.bitwise.bitwise_and)
    visit_bitwisenot = unary(tf.bitwise.invert)
    visit_bitwiseor = broadcasting(tf.bitwise.bitwise_or)
    visit_bitwisexor = broadcasting(tf.bitwise.bitwise_xor)
    visit_equal = broadcasting(tf.equal, np.equal)
    visit_greater = broadcasting(tf.greater, np.greater)
    visit_greaterorequal = broadcasting(tf.greater_equal, np.greater_equal)

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

    visit_isnan = unary(tf.math.is_nan)
    visit_less = broadcasting(tf.less, np.less)
    visit_lessorequal = broadcasting(tf.less_equal, np.less_equal)
    visit_not = unary(tf.logical_not, np.logical_not)
    visit_or = broadcasting(tf.logical_or, np.logical_or)

    def visit_where(self, op, network) -> None:
        """Where: condition ? X : Y, broadcasting."""
        def where(condition, x, y):
            if _is_np(condition, x, y):
                return np.where(condition, x, y)
            return tf.where(condition, x, y)
        self._elementwise(op, where)

    visit_xor = broadcasting(tf.math.logical_xor)
