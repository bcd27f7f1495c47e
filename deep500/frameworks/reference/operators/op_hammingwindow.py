"""HammingWindow: w[n] = α - β cos(2πn / D) with α = 25/46 and β = 1 - α, the values the
ONNX specification gives (see ``_op_common_window.py`` for D).
https://onnx.ai/onnx/operators/onnx__HammingWindow.html"""
from deep500.frameworks.reference.operators._op_common_window import CosineWindow
from deep500.frameworks.reference.operators.registry import register


@register("HammingWindow")
class HammingWindow(CosineWindow):
    coefficients = (25 / 46, -(1 - 25 / 46))
