"""SoftmaxCrossEntropyLoss (opset 13): loss = -weights[label]·log_softmax(scores)[label]
along the class axis 1, zero where label == ignore_index, then reduced ('none', 'sum', or
'mean' = sum of losses / sum of the weights of the non-ignored elements); also outputs
log_softmax(scores). https://onnx.ai/onnx/operators/onnx__SoftmaxCrossEntropyLoss.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_softmax import (log_softmax,
                                                                        log_softmax_backward)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError

_REDUCTIONS = ("none", "sum", "mean")


@register("SoftmaxCrossEntropyLoss")
class SoftmaxCrossEntropyLoss(ReferenceOp):
    defaults = {"ignore_index": None, "reduction": "mean"}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        if self.attr("reduction") not in _REDUCTIONS:
            raise Deep500Error(f"{self.op_type}: reduction must be one of {_REDUCTIONS}, "
                               f"not {self.attr('reduction')!r}")

    def _check(self, scores, labels, weights):
        name = self.op_type
        if scores.ndim < 2:
            raise ShapeError(f"{name}: scores must have shape (N, C) or (N, C, d1, ...), "
                             f"got {scores.shape}")
        expected = (scores.shape[0],) + scores.shape[2:]
        if labels.shape != expected:
            raise ShapeError(f"{name}: labels must have shape {expected} for scores of shape "
                             f"{scores.shape}, got {labels.shape}")
        if not np.issubdtype(labels.dtype, np.integer):
            raise ShapeError(f"{name}: labels must be integers (int32 or int64), "
                             f"got {labels.dtype}")
        classes = scores.shape[1]
        if weights is not None and weights.shape != (classes,):
            raise ShapeError(f"{name}: weights must have shape ({classes},), one per class, "
                             f"got {weights.shape}")
        valid = self._valid(labels)
        bad = valid & ((labels < 0) | (labels >= classes))
        if np.any(bad):
            raise Deep500Error(f"{name}: label {labels[bad].flat[0]} is out of range for "
                               f"{classes} classes (and is not ignore_index="
                               f"{self.attr('ignore_index')})")

    def _valid(self, labels):
        ignore = self.attr("ignore_index")
        return np.ones(labels.shape, bool) if ignore is None else labels != ignore

    def _sample_weights(self, scores, labels, weights):
        """(labels with ignored ones replaced by class 0, per-element weights W)."""
        valid = self._valid(labels)
        safe = np.where(valid, labels, 0)
        w = (weights.astype(scores.dtype, copy=False)[safe] if weights is not None
             else np.ones(labels.shape, scores.dtype))
        return safe, w * valid

    def forward(self, scores, labels, weights=None):
        self._check(scores, labels, weights)
        log_prob = log_softmax(scores, axis=1)
        safe, w = self._sample_weights(scores, labels, weights)
        picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
        loss = -picked * w
        reduction = self.attr("reduction")
        if reduction == "sum":
            loss = np.asarray(loss.sum(), scores.dtype)
        elif reduction == "mean":
            # With every element ignored this is 0/0 = nan, as in PyTorch.
            with np.errstate(invalid="ignore", divide="ignore"):
                loss = np.asarray(loss.sum() / w.sum(), scores.dtype)
        return loss, log_prob

    def backward(self, grads, fwd_inputs, fwd_outputs):
        scores, labels = fwd_inputs[0], fwd_inputs[1]
        weights = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        d_loss, d_log_prob = grads[0], grads[1] if len(grads) > 1 else None
        log_prob = fwd_outputs[1]
        d_log_prob = np.zeros_like(log_prob) if d_log_prob is None else d_log_prob.copy()
        if d_loss is not None:
            safe, w = self._sample_weights(scores, labels, weights)
            reduction = self.attr("reduction")
            if reduction == "mean":
                with np.errstate(invalid="ignore", divide="ignore"):
                    w = w / w.sum()
            # loss = -Σ coefficient·log_prob[label]: the gradient w.r.t. log_prob is
            # -coefficient at each label position.
            coefficient = d_loss * w
            np.put_along_axis(d_log_prob, safe[:, None],
                              np.take_along_axis(d_log_prob, safe[:, None], axis=1)
                              - coefficient[:, None], axis=1)
        d_scores = log_softmax_backward(d_log_prob, log_prob, axis=1).astype(scores.dtype,
                                                                            copy=False)
        return [d_scores, None] + ([None] if len(fwd_inputs) > 2 else [])
