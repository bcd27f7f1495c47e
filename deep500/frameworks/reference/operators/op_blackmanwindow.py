"""BlackmanWindow: w[n] = 0.42 - 0.5 cos(2πn / D) + 0.08 cos(4πn / D) (see
``_op_common_window.py`` for D). https://onnx.ai/onnx/operators/onnx__BlackmanWindow.html"""
from deep500.frameworks.reference.operators._op_common_window import CosineWindow
from deep500.frameworks.reference.operators.registry import register


@register("BlackmanWindow")
class BlackmanWindow(CosineWindow):
    coefficients = (0.42, -0.5, 0.08)
