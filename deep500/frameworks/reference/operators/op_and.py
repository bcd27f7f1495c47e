"""And: logical and of two bool tensors, with multidirectional
broadcasting. https://onnx.ai/onnx/operators/onnx__And.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_compare import (BinaryNoGradient,
                                                                       BOOL)
from deep500.frameworks.reference.operators.registry import register


@register("And")
class And(BinaryNoGradient):
    kinds = BOOL
    combine = np.logical_and
