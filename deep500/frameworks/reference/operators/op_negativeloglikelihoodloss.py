"""NegativeLogLikelihoodLoss (opset 13): loss = -weight[target]·input[target] along the class
axis 1 (input holds log-probabilities), zero where target == ignore_index, then reduced
('none', 'sum', or 'mean' = sum of losses / sum of the weights of the non-ignored
elements). https://onnx.ai/onnx/operators/onnx__NegativeLogLikelihoodLoss.html"""
import numpy as np

from deep500.frameworks.reference.operators.op_softmaxcrossentropyloss import (
    SoftmaxCrossEntropyLoss)
from deep500.frameworks.reference.operators.registry import register


@register("NegativeLogLikelihoodLoss")
class NegativeLogLikelihoodLoss(SoftmaxCrossEntropyLoss):
    """SoftmaxCrossEntropyLoss without the softmax: the same checks, weights and
    reductions, applied to the given log-probabilities."""

    def forward(self, input, target, weight=None):
        self._check(input, target, weight)
        safe, w = self._sample_weights(input, target, weight)
        loss = -np.take_along_axis(input, safe[:, None], axis=1)[:, 0] * w
        reduction = self.attr("reduction")
        if reduction == "sum":
            return np.asarray(loss.sum(), input.dtype)
        if reduction == "mean":
            # With every element ignored this is 0/0 = nan, as in PyTorch.
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.asarray(loss.sum() / w.sum(), input.dtype)
        return loss

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input, target = fwd_inputs[0], fwd_inputs[1]
        weight = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        d_input = np.zeros_like(input)
        if grads[0] is not None:
            safe, w = self._sample_weights(input, target, weight)
            if self.attr("reduction") == "mean":
                with np.errstate(invalid="ignore", divide="ignore"):
                    w = w / w.sum()
            # Each (sample, position) picks one class, so the scatter never collides.
            np.put_along_axis(d_input, safe[:, None], (-grads[0] * w)[:, None]
                              .astype(input.dtype, copy=False), axis=1)
        return [d_input, None] + ([None] if len(fwd_inputs) > 2 else [])
