"""Resize: nearest, (multi-)linear or (multi-)cubic interpolation of chosen axes, to
sizes or by scales, with every coordinate_transformation_mode, nearest_mode,
exclude_outside, extrapolation_value (tf_crop_and_resize), antialias and
keep_aspect_ratio_policy. Resize-10 (inputs X and scales) resizes with the asymmetric
transformation. The interpolation plans are ONNX's semantics, shared by every executor
(``deep500/utils/onnx_interop/resize.py``); this operator applies them with NumPy.
Backward: the gradient with respect to X (the result is linear in X).
https://onnx.ai/onnx/operators/onnx__Resize.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.onnx_interop.resize import (RESIZE_DEFAULTS, apply_backward,
                                               apply_forward, plans_from)


@register("Resize")
class Resize(ReferenceOp):
    defaults = dict(RESIZE_DEFAULTS)

    def _plans_from(self, X, inputs):
        return plans_from(self.op_type, self._attributes, np.shape(X), inputs)

    def forward(self, X, *inputs):
        X = np.asarray(X)
        return apply_forward(X, self._plans_from(X, inputs),
                             float(self.attr("extrapolation_value")))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X = np.asarray(fwd_inputs[0])
        others = [None] * (len(fwd_inputs) - 1)
        if not np.issubdtype(X.dtype, np.floating) or grads[0] is None:
            return [None] + others
        plans = self._plans_from(X, fwd_inputs[1:])
        return [apply_backward(grads[0], plans, X.dtype)] + others
