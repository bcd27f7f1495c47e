"""IsInf: a bool tensor, true where X is +inf (if detect_positive) or -inf (if
detect_negative). https://onnx.ai/onnx/operators/onnx__IsInf.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import compute_dtype
from deep500.frameworks.reference.operators._op_common_elementwise import check_kind
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("IsInf")
class IsInf(ReferenceOp):
    defaults = {"detect_negative": 1, "detect_positive": 1}

    def forward(self, X):
        X = np.asarray(X)
        check_kind(self.op_type, "f", X)
        X = X.astype(compute_dtype(X.dtype), copy=False)
        infinite = np.isinf(X)
        if not self.attr("detect_positive"):
            infinite &= X < 0
        if not self.attr("detect_negative"):
            infinite &= X > 0
        return np.asarray(infinite)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]
