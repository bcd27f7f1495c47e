"""Scatter (opsets 9-10, deprecated): ScatterElements without a reduction.
https://onnx.ai/onnx/operators/onnx__Scatter.html"""
from deep500.frameworks.reference.operators.op_scatterelements import ScatterElements
from deep500.frameworks.reference.operators.registry import register


@register("Scatter")
class Scatter(ScatterElements):
    defaults = {"axis": 0}

    def attr(self, name: str):
        return "none" if name == "reduction" else super().attr(name)
