"""HannWindow: w[n] = sin²(πn / D) = 0.5 - 0.5 cos(2πn / D) (see
``_op_common_window.py`` for D). https://onnx.ai/onnx/operators/onnx__HannWindow.html"""
from deep500.frameworks.reference.operators._op_common_window import CosineWindow
from deep500.frameworks.reference.operators.registry import register


@register("HannWindow")
class HannWindow(CosineWindow):
    coefficients = (0.5, -0.5)
