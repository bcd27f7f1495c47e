"""BitwiseAnd: bitwise and of two integer tensors, with multidirectional
broadcasting. https://onnx.ai/onnx/operators/onnx__BitwiseAnd.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_compare import (BinaryNoGradient,
                                                                       INTEGER)
from deep500.frameworks.reference.operators.registry import register


@register("BitwiseAnd")
class BitwiseAnd(BinaryNoGradient):
    kinds = INTEGER
    combine = np.bitwise_and
