"""Resize: nearest, (multi-)linear or (multi-)cubic interpolation of chosen axes, to
sizes or by scales, with every coordinate_transformation_mode, nearest_mode,
exclude_outside, extrapolation_value (tf_crop_and_resize), antialias and
keep_aspect_ratio_policy. Resize-10 (inputs X and scales) resizes with the asymmetric
transformation. Backward: the gradient with respect to X (the result is linear in X).
https://onnx.ai/onnx/operators/onnx__Resize.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_resize import (COORDINATE_MODES,
                                                                       MODES, NEAREST_MODES,
                                                                       apply_backward,
                                                                       apply_forward,
                                                                       check_choice,
                                                                       output_scales_and_sizes,
                                                                       plan_axis)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError

POLICIES = ("stretch", "not_larger", "not_smaller")


def _given(value):
    """An optional input, None when omitted or empty (older exporters pass empty ones)."""
    return None if value is None or np.size(value) == 0 else np.asarray(value)


@register("Resize")
class Resize(ReferenceOp):
    defaults = {"antialias": 0, "axes": None, "coordinate_transformation_mode": "half_pixel",
                "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
                "keep_aspect_ratio_policy": "stretch", "mode": "nearest",
                "nearest_mode": "round_prefer_floor"}

    def _plans(self, X, roi=None, scales=None, sizes=None, legacy=False):
        name = self.op_type
        X = np.asarray(X)
        rank = X.ndim
        if rank < 1:
            raise ShapeError(f"{name}: X must have at least one axis, got a scalar")
        mode = check_choice(name, "mode", self.attr("mode"), MODES)
        coordinate_mode = check_choice(name, "coordinate_transformation_mode",
                                       self.attr("coordinate_transformation_mode"),
                                       COORDINATE_MODES)
        nearest_mode = check_choice(name, "nearest_mode", self.attr("nearest_mode"),
                                    NEAREST_MODES)
        policy = check_choice(name, "keep_aspect_ratio_policy",
                              self.attr("keep_aspect_ratio_policy"), POLICIES)
        if legacy:
            coordinate_mode, nearest_mode = "asymmetric", "simple"
        axes = self.attr("axes")
        if axes is None:
            axes = list(range(rank))
        else:
            axes = [int(a) for a in axes]
            if any(not -rank <= a < rank for a in axes):
                raise ShapeError(f"{name}: axes {axes} must lie in [{-rank}, {rank - 1}] for "
                                 f"X of shape {list(X.shape)}")
            axes = [a % rank for a in axes]
            if len(set(axes)) != len(axes):
                raise ShapeError(f"{name}: axes {self.attr('axes')} repeat an axis")
        scales, sizes = _given(scales), _given(sizes)
        scale_list, lengths = output_scales_and_sizes(name, X.shape, axes, scales, sizes,
                                                      policy if sizes is not None else "stretch")
        roi = _given(roi)
        if coordinate_mode == "tf_crop_and_resize":
            if roi is None:
                roi = np.concatenate([np.zeros(len(axes)), np.ones(len(axes))])
            roi = np.asarray(roi, np.float64).ravel()
            if roi.size != 2 * len(axes):
                raise ShapeError(f"{name}: roi has {roi.size} values; it needs "
                                 f"{2 * len(axes)} (starts then ends of each resized axis)")
        plans = []
        for i, (axis, scale, length) in enumerate(zip(axes, scale_list, lengths)):
            axis_roi = (0.0, 1.0) if roi is None or coordinate_mode != "tf_crop_and_resize" \
                else (roi[i], roi[i + len(axes)])
            if np.isclose(scale, 1.0) and length == X.shape[axis] and axis_roi == (0.0, 1.0):
                continue   # an axis kept as it is (even where a mode would shift it)
            plan = plan_axis(axis, X.shape[axis], length, scale, mode=mode,
                             coordinate_mode=coordinate_mode, nearest_mode=nearest_mode,
                             cubic_a=float(self.attr("cubic_coeff_a")),
                             exclude_outside=bool(self.attr("exclude_outside")),
                             antialias=bool(self.attr("antialias")), roi=axis_roi)
            if not self._identity(plan, X.shape[axis]):
                plans.append(plan)
        return plans

    @staticmethod
    def _identity(plan, in_len):
        if plan.outside is not None:
            return False
        if plan.index is not None:
            return len(plan.index) == in_len and np.array_equal(plan.index, np.arange(in_len))
        return plan.weights.shape == (in_len, in_len) and np.array_equal(plan.weights,
                                                                        np.eye(in_len))

    def _plans_from(self, X, inputs):
        # Resize-10 took (X, scales); from opset 11 the second input is roi, and scales or
        # sizes follow it, so two inputs with a non-empty second mean Resize-10.
        if len(inputs) == 1 and _given(inputs[0]) is not None:
            return self._plans(X, scales=inputs[0], legacy=True)
        return self._plans(X, *inputs)

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
