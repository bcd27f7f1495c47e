"""Ceil: Y = ceil(X); its gradient is zero where it exists.
https://onnx.ai/onnx/operators/onnx__Ceil.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import PiecewiseConstant
from deep500.frameworks.reference.operators.registry import register


@register("Ceil")
class Ceil(PiecewiseConstant):
    def _forward(self, X):
        return np.ceil(X)
