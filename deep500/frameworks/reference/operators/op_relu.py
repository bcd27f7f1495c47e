"""Relu: Y = max(X, 0). https://onnx.ai/onnx/operators/onnx__Relu.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Relu")
class Relu(ReferenceOp):
    def forward(self, X):
        return np.maximum(X, 0).astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        return [grads[0] * (X > 0)]
