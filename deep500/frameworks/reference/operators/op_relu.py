"""Relu: Y = max(X, 0), for float and signed integer tensors (opset 14).
https://onnx.ai/onnx/operators/onnx__Relu.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Relu")
class Relu(Unary):
    kinds = "fi"

    def _forward(self, X):
        return np.maximum(X, X.dtype.type(0))

    def forward_inplace(self, X):
        """``forward`` writing into X, which the caller no longer needs (see
        ``ReferenceGraphExecutor``: it passes only arrays nothing else refers to)."""
        if X.dtype not in (np.float32, np.float64):
            return self.forward(X)
        return np.maximum(X, X.dtype.type(0), out=X)

    def _backward(self, dY, X, Y):
        return np.where(X > 0, dY, X.dtype.type(0))
