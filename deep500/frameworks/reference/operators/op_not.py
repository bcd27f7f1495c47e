"""Not: logical negation of a bool tensor. https://onnx.ai/onnx/operators/onnx__Not.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_compare import (UnaryNoGradient,
                                                                       BOOL)
from deep500.frameworks.reference.operators.registry import register


@register("Not")
class Not(UnaryNoGradient):
    kinds = BOOL
    combine = np.logical_not
