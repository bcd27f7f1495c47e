"""Round: X rounded to the nearest integer, halves to the even one (round(2.5) = 2,
round(-1.5) = -2); its gradient is zero where it exists.
https://onnx.ai/onnx/operators/onnx__Round.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import PiecewiseConstant
from deep500.frameworks.reference.operators.registry import register


@register("Round")
class Round(PiecewiseConstant):
    def _forward(self, X):
        return np.round(X)
