"""BitwiseNot: bitwise negation of an integer tensor.
https://onnx.ai/onnx/operators/onnx__BitwiseNot.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_compare import (UnaryNoGradient,
                                                                       INTEGER)
from deep500.frameworks.reference.operators.registry import register


@register("BitwiseNot")
class BitwiseNot(UnaryNoGradient):
    kinds = INTEGER
    combine = np.invert
