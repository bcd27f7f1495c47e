"""TensorFlowVisitor: the ml family (``deep500/frameworks/families.py``), classical
machine learning of the ai.onnx.ml domain:
https://onnx.ai/onnx/operators/onnx_aionnxml_Binarizer.html,
.../onnx_aionnxml_ArrayFeatureExtractor.html.
"""
from __future__ import annotations

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr
from deep500.frameworks.tensorflow.ops._values import _tf_dtype


class MlOps:
    """``visit_<op>`` of the ml family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_binarizer(self, op, network) -> None:
        """Binarizer (ai.onnx.ml): 1 where x > threshold, else 0, in x's type."""
        threshold = float(_attr(op, "threshold", 0.0))
        self._unary(op, lambda x: tf.cast(x > tf.cast(threshold, _tf_dtype(x)), _tf_dtype(x)))

    def visit_arrayfeatureextractor(self, op, network) -> None:
        """ArrayFeatureExtractor (ai.onnx.ml): the last axis' elements at the (flattened)
        indices; a vector input gives one row."""
        def extract(x, indices):
            x = tf.convert_to_tensor(x)
            picked = tf.gather(x, tf.reshape(tf.cast(indices, tf.int64), [-1]), axis=-1)
            return picked[None, :] if len(x.shape) == 1 else picked
        self.emit(extract, [self.key(n) for n in op.inputs], op.outputs[0])
