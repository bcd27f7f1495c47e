"""Binarizer (domain ai.onnx.ml): 1 where X > ``threshold``, else 0, in X's type.
https://onnx.ai/onnx/operators/onnx_aionnxml_Binarizer.html

A step function: its derivative is zero wherever it exists."""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Binarizer", domain="ai.onnx.ml")
class Binarizer(ReferenceOp):
    defaults = {"threshold": 0.0}

    def forward(self, X):
        X = np.asarray(X)
        return (X > X.dtype.type(self.attr("threshold"))).astype(X.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [np.zeros_like(fwd_inputs[0])]
