"""Upsample (deprecated in opset 10 in favour of Resize): nearest or (bi)linear
upsampling by ``scales`` (one per axis, each >= 1), output length floor(length · scale),
coordinates mapped as Resize's asymmetric mode, nearest rounding down. Opset 7 gave
scales as an attribute; it becomes the input. Plans: ``utils/onnx_interop/resize.py``.
https://onnx.ai/onnx/operators/onnx__Upsample.html"""
from deep500.frameworks.reference.operators.op_resize import Resize
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.onnx_interop.resize import RESIZE_DEFAULTS, upsample_mode


@register("Upsample")
class Upsample(Resize):
    defaults = {"mode": "nearest"}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        self._attributes = {**RESIZE_DEFAULTS, "mode": upsample_mode(self.attr("mode"))}

    @property
    def attributes(self) -> dict:
        return {"mode": self.attr("mode")}
