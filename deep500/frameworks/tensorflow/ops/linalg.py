"""TensorFlowVisitor: the linalg family (``deep500/frameworks/families.py``), matrix
products and linear algebra: https://onnx.ai/onnx/operators/onnx__Gemm.html,
.../onnx__MatMul.html, .../onnx__Einsum.html, .../onnx__Det.html. A Gemm weight read only
by Gemms with transB=1, or multiplying a flattened channels-last tensor, is stored in
the layout the product reads (``ParameterLayout``).
"""
from __future__ import annotations

from deep500.frameworks.tensorflow._layout import FLAT, ParameterLayout
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _text
from deep500.frameworks.tensorflow.ops._values import _in_wider


class LinalgOps:
    """``visit_<op>`` of the linalg family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_gemm(self, op, network) -> None:
        """Gemm: Y = alpha·A'·B' + beta·C, A' = transpose(A) if transA, B' likewise."""
        a = op.attributes
        alpha, beta = float(a["alpha"]), float(a["beta"])
        trans_a, trans_b = bool(a["transA"]), bool(a["transB"])
        x_name, w_name = op.inputs[0], op.inputs[1]
        if x_name in self.flattened:
            # The flattened input is channels-last; the weight is stored to match.
            channels, spatial = self.flattened[x_name]
            self._store_parameter(w_name, ParameterLayout.flattened_channels_last(
                self._stored_shape(w_name), channels, spatial, trans_b))
            x_key, trans_b = x_name + FLAT, False
        else:
            x_key = self.key(x_name)
            if trans_b and self._only_consumed_as(w_name, lambda use, index: (
                    use.op_type == "Gemm" and index == 1 and use.attributes["transB"]
                    and use.inputs[0] not in self.flattened)):
                self._store_parameter(w_name, ParameterLayout.transposed(
                    self._stored_shape(w_name)))
                trans_b = False

        def gemm(x, w, c=None):
            y = tf.linalg.matmul(x, w, transpose_a=trans_a, transpose_b=trans_b)
            if alpha != 1.0:
                y = y * alpha
            if c is None or beta == 0.0:
                return y
            if beta != 1.0:
                c = c * beta
            if len(c.shape) == 2 and c.shape[0] == 1 and c.shape[1] == y.shape[-1]:
                # A row: a bias. (Grappler mis-fuses MatMul(transpose_a) + Add of a row.)
                c = tf.reshape(c, [-1])
            if len(c.shape) == 1 and c.shape[0] == y.shape[-1]:
                return tf.nn.bias_add(y, c)
            return y + c
        self.emit(gemm, [x_key] + [self.key(n) for n in op.inputs[1:]], op.outputs[0], rank=2)

    def visit_matmul(self, op, network) -> None:
        """MatMul: NumPy matmul semantics (1-D operands promoted, batch broadcasting)."""
        def matmul(x, y):
            rx, ry = len(x.shape), len(y.shape)
            if rx > 1 and ry > 1:
                return tf.linalg.matmul(x, y)
            z = tf.linalg.matmul(x[tf.newaxis] if rx == 1 else x,
                                 y[:, tf.newaxis] if ry == 1 else y)
            if ry == 1:
                z = tf.squeeze(z, -1)
            return tf.squeeze(z, -2 if ry > 1 else -1) if rx == 1 else z
        self.emit(matmul, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_det(self, op, network) -> None:
        """Det: determinants of the (..., M, M) input."""
        def det(x):
            return _in_wider(tf.linalg.det, tf.convert_to_tensor(x))
        self.emit(det, [self.key(op.inputs[0])], op.outputs[0])

    def visit_einsum(self, op, network) -> None:
        """Einsum: https://onnx.ai/onnx/operators/onnx__Einsum.html"""
        equation = _text(op.attributes.get("equation"), "").replace(" ", "")

        def einsum(*xs):
            return tf.einsum(equation, *xs)
        self.emit(einsum, [self.key(n) for n in op.inputs], op.outputs[0])
