"""IsNaN: a bool tensor, true where X is NaN.
https://onnx.ai/onnx/operators/onnx__IsNaN.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import compute_dtype
from deep500.frameworks.reference.operators._op_common_elementwise import check_kind
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("IsNaN")
class IsNaN(ReferenceOp):
    def forward(self, X):
        X = np.asarray(X)
        check_kind(self.op_type, "f", X)
        return np.asarray(np.isnan(X.astype(compute_dtype(X.dtype), copy=False)))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]
