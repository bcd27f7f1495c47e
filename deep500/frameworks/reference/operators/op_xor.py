"""Xor: logical exclusive or of two bool tensors, with multidirectional
broadcasting. https://onnx.ai/onnx/operators/onnx__Xor.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_compare import (BinaryNoGradient,
                                                                       BOOL)
from deep500.frameworks.reference.operators.registry import register


@register("Xor")
class Xor(BinaryNoGradient):
    kinds = BOOL
    combine = np.logical_xor
