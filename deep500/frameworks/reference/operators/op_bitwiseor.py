"""BitwiseOr: bitwise or of two integer tensors, with multidirectional
broadcasting. https://onnx.ai/onnx/operators/onnx__BitwiseOr.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_compare import (BinaryNoGradient,
                                                                       INTEGER)
from deep500.frameworks.reference.operators.registry import register


@register("BitwiseOr")
class BitwiseOr(BinaryNoGradient):
    kinds = INTEGER
    combine = np.bitwise_or
