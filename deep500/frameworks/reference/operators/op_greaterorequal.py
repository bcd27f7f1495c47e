"""GreaterOrEqual: C = A >= B elementwise, as bool, with multidirectional
broadcasting. https://onnx.ai/onnx/operators/onnx__GreaterOrEqual.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_compare import (BinaryNoGradient,
                                                                       NUMERIC)
from deep500.frameworks.reference.operators.registry import register


@register("GreaterOrEqual")
class GreaterOrEqual(BinaryNoGradient):
    kinds = NUMERIC
    combine = np.greater_equal
