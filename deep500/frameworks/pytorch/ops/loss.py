"""The loss family in PyTorch: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.
https://onnx.ai/onnx/operators/onnx__SoftmaxCrossEntropyLoss.html
"""
from __future__ import annotations

from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional


class LossOps:
    """``visit_<op>`` of the loss family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def _labels(self, name):
        return (lambda t: t) if self._dtype(name) == torch.int64 else (lambda t: t.long())

    def _nll(self, op, labels):
        """F.nll_loss, or with class weights the same sum written out, since PyTorch's
        kernel gives no gradient for the weights (which are parameters here)."""
        reduction = op.attributes["reduction"]
        ignore = op.attributes["ignore_index"]

        def nll(log_prob, target, weights=None):
            target = labels(target)
            if weights is None:
                return F.nll_loss(log_prob, target, ignore_index=-100 if ignore is None
                                  else ignore, reduction=reduction)
            valid = None if ignore is None else target != ignore
            safe = target if valid is None else torch.where(valid, target, 0)
            picked = log_prob.gather(1, safe.unsqueeze(1)).squeeze(1)
            w = weights[safe] if valid is None else weights[safe] * valid
            loss = -picked * w
            if reduction == "sum":
                return loss.sum()
            if reduction == "mean":
                return loss.sum() / w.sum()
            return loss
        return nll

    def visit_softmaxcrossentropyloss(self, op, network):
        nll = self._nll(op, self._labels(op.inputs[1]))
        if len(op.outputs) > 1 and op.outputs[1]:
            def cross_entropy_with_log_prob(scores, target, weights=None):
                log_prob = torch.log_softmax(scores, 1)
                return nll(log_prob, target, weights), log_prob
            self._emit(op, cross_entropy_with_log_prob)
            return
        outputs = len(op.outputs)
        reduction = op.attributes["reduction"]
        ignore = op.attributes["ignore_index"]
        ignore = -100 if ignore is None else ignore  # PyTorch's default: none ignored
        labels = self._labels(op.inputs[1])

        def cross_entropy(scores, target, weights=None):
            if weights is None:
                loss = F.cross_entropy(scores, labels(target), ignore_index=ignore,
                                       reduction=reduction)
            else:
                loss = nll(torch.log_softmax(scores, 1), target, weights)
            return loss if outputs == 1 else (loss, None)
        self._emit(op, cross_entropy)

    def visit_negativeloglikelihoodloss(self, op, network):
        self._emit(op, self._nll(op, self._labels(op.inputs[1])))


__all__ = ["LossOps"]
