"""TensorFlowVisitor: the loss family (``deep500/frameworks/families.py``),
https://onnx.ai/onnx/operators/onnx__SoftmaxCrossEntropyLoss.html and
.../onnx__NegativeLogLikelihoodLoss.html. Scores of rank 3 or more are read with their
class axis last (channels-last).
"""
from __future__ import annotations

from deep500.frameworks.tensorflow._layout import (CHANNELS_LAST, ONNX_LAYOUT,
                                                   to_channels_last, to_onnx_layout)
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._values import _like, _tf_dtype


def _reduce_loss(per_element, weights, reduction):
    if reduction == "none":
        return per_element
    if reduction == "sum":
        return tf.reduce_sum(per_element)
    if weights is None:
        return tf.reduce_mean(per_element)
    return tf.reduce_sum(per_element) / tf.reduce_sum(weights)


def _picked_loss(log_prob, labels, weights, ignore, reduction):
    """-weights[label]·log_prob[..., label], zero where label == ignore, reduced (mean:
    divided by the summed weights of the elements not ignored)."""
    labels = tf.convert_to_tensor(labels)
    if ignore is not None:
        valid = tf.not_equal(labels, ignore)
        safe = tf.where(valid, labels, tf.zeros_like(labels))
    else:
        valid, safe = None, labels
    picked = tf.gather(log_prob, safe, axis=-1, batch_dims=len(labels.shape))
    w = None
    if weights is not None:
        w = tf.gather(_like(weights, log_prob), safe)
    if valid is not None:
        mask = tf.cast(valid, _tf_dtype(log_prob))
        w = mask if w is None else w * mask
    per_element = -picked if w is None else -picked * w
    return _reduce_loss(per_element, w, reduction)


class LossOps:
    """``visit_<op>`` of the loss family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _class_last(self, name: str) -> tuple[str, bool]:
        """The key of a (N, C, d1, ...) tensor with its class axis last, and whether
        the closure must move it there itself (rank unknown when building)."""
        rank = self.rank(name)
        if rank is not None and rank >= 3:
            return self.key(name, CHANNELS_LAST), False
        return self.key(name), rank is None

    def visit_softmaxcrossentropyloss(self, op, network) -> None:
        """SoftmaxCrossEntropyLoss:
        https://onnx.ai/onnx/operators/onnx__SoftmaxCrossEntropyLoss.html"""
        reduction = op.attributes.get("reduction") or "mean"
        ignore = op.attributes.get("ignore_index")
        want_log_prob = len(op.outputs) > 1 and bool(op.outputs[1])
        rank = self.rank(op.inputs[0])

        scores_key, move = self._class_last(op.inputs[0])

        def loss(scores, labels, weights=None):
            moved = move and len(scores.shape) > 2
            if moved:
                scores = to_channels_last(scores)
            if weights is None and ignore is None and not want_log_prob:
                # One fused kernel, as Keras' sparse categorical cross-entropy.
                per_element = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, scores)
                return _reduce_loss(per_element, None, reduction)
            log_prob = tf.nn.log_softmax(scores, axis=-1)
            result = _picked_loss(log_prob, labels, weights, ignore, reduction)
            if not want_log_prob:
                return result
            return result, to_onnx_layout(log_prob) if moved else log_prob
        inputs = [scores_key] + [self.key(n) for n in op.inputs[1:]]
        rank = rank or 0
        if want_log_prob:
            keys = (self._output_key(op.outputs[0], ONNX_LAYOUT),
                    self._output_key(op.outputs[1],
                                     CHANNELS_LAST if rank >= 3 else ONNX_LAYOUT, rank))
            self._emit(loss, inputs, keys)
            if rank >= 3 and not self.propagate_layout:
                self.key(op.outputs[1])
        else:
            self.emit(loss, inputs, op.outputs[0])

    def visit_negativeloglikelihoodloss(self, op, network) -> None:
        """NegativeLogLikelihoodLoss:
        https://onnx.ai/onnx/operators/onnx__NegativeLogLikelihoodLoss.html"""
        reduction = op.attributes.get("reduction") or "mean"
        ignore = op.attributes.get("ignore_index")

        log_prob_key, move = self._class_last(op.inputs[0])

        def loss(log_prob, target, weights=None):
            if move and len(log_prob.shape) > 2:
                log_prob = to_channels_last(log_prob)
            return _picked_loss(log_prob, target, weights, ignore, reduction)
        inputs = [log_prob_key] + [self.key(n) for n in op.inputs[1:]]
        self.emit(loss, inputs, op.outputs[0])
