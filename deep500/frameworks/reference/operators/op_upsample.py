"""Upsample (deprecated in opset 10 in favour of Resize): nearest or (bi)linear
upsampling by ``scales`` (one per axis, each >= 1), output length floor(length · scale),
coordinates mapped as Resize's asymmetric mode, nearest rounding down. Opset 7 gave
scales as an attribute; it becomes the input. https://onnx.ai/onnx/operators/onnx__Upsample.html"""
import numpy as np

from deep500.frameworks.reference.operators.op_resize import Resize
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError, UnsupportedError


@register("Upsample")
class Upsample(Resize):
    defaults = {"mode": "nearest"}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        mode = self.attr("mode")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode == "bilinear":   # opset 1's name, for 4-D inputs
            mode = "linear"
        if mode not in ("nearest", "linear"):
            raise UnsupportedError(f"Upsample: mode={mode!r} must be 'nearest' or 'linear'")
        self._attributes = {**Resize.defaults, "mode": mode}

    @property
    def attributes(self) -> dict:
        return {"mode": self.attr("mode")}

    def _plans_from(self, X, inputs):
        if not inputs or inputs[0] is None:
            raise ShapeError("Upsample: the input scales is required")
        scales = np.asarray(inputs[0], np.float64).ravel()
        if scales.size != np.ndim(X):
            raise ShapeError(f"Upsample: scales has {scales.size} values; X of shape "
                             f"{list(np.shape(X))} needs {np.ndim(X)}")
        if np.any(scales < 1):
            raise ShapeError(f"Upsample: scales {scales.tolist()} must all be >= 1")
        return self._plans(X, scales=scales, legacy=True)
