"""Sign: -1, 0 or 1 as X is negative, zero or positive (NaN stays NaN), for float and
integer tensors; its gradient is zero where it exists.
https://onnx.ai/onnx/operators/onnx__Sign.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import PiecewiseConstant
from deep500.frameworks.reference.operators.registry import register


@register("Sign")
class Sign(PiecewiseConstant):
    kinds = "fiu"

    def _forward(self, X):
        return np.sign(X)
