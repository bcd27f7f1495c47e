"""Max: elementwise maximum of the inputs with multidirectional broadcasting.
https://onnx.ai/onnx/operators/onnx__Max.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_minmax import Extremum
from deep500.frameworks.reference.operators.registry import register


@register("Max")
class Max(Extremum):
    combine = np.maximum
