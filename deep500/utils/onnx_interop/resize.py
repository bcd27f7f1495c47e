"""ONNX's Resize and Upsample semantics, once for every executor: per-axis interpolation
plans. ONNX's N-D interpolation is separable (a tensor product of 1-D interpolations), so
each resized axis becomes an index (nearest) or an (output, input) weight matrix (linear,
cubic, with antialias and exclude_outside). :func:`plans_from` computes them from a
node's attributes, the input's shape and its constant roi/scales/sizes; the reference
executor applies them with NumPy (:func:`apply_forward`, and the transposes in
:func:`apply_backward`), PyTorch and TensorFlow with a gather or a tensordot.
https://onnx.ai/onnx/operators/onnx__Resize.html, .../onnx__Upsample.html"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deep500.utils.errors import ShapeError, UnsupportedError
from deep500.utils.onnx_interop.axes import distinct_axes

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                    "align_corners", "asymmetric", "tf_crop_and_resize",
                    "tf_half_pixel_for_nn")   # the last one: Resize-11 only
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
"""``simple`` (Upsample and Resize-10): floor when upsampling, ceil when downsampling,
as onnxruntime does for those operators."""


@dataclass
class AxisPlan:
    """How one axis is resized: ``index`` (nearest) or ``weights`` (out, in) (linear,
    cubic); ``outside`` marks output positions that take the extrapolation value."""
    axis: int
    in_len: int
    index: np.ndarray | None
    weights: np.ndarray | None
    outside: np.ndarray | None

    @property
    def matrix(self) -> np.ndarray:
        if self.weights is not None:
            return self.weights
        one_hot = np.zeros((len(self.index), self.in_len))
        one_hot[np.arange(len(self.index)), self.index] = 1
        return one_hot


def original_coordinates(mode: str, out_len: int, in_len: int, scale: float,
                         roi_start: float, roi_end: float) -> np.ndarray:
    """Position in the input of each output element (coordinate_transformation_mode).
    ``length_resized`` is in_len · scale, which is fractional when scales do not divide
    evenly (as in onnx's reference implementation); ``out_len`` is its integer part."""
    x = np.arange(out_len, dtype=np.float64)
    resized = in_len * scale
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / resized)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if resized > 1 else np.zeros(out_len)
    if mode == "align_corners":
        return x * (in_len - 1) / (resized - 1) if resized != 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    # tf_crop_and_resize
    if resized != 1:
        return roi_start * (in_len - 1) + x * (roi_end - roi_start) * (in_len - 1) / (resized - 1)
    return np.full(out_len, 0.5 * (roi_start + roi_end) * (in_len - 1))


def _keys(d: np.ndarray, a: float) -> np.ndarray:
    """The cubic convolution kernel of Keys (1981) with coefficient a, at distances d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = (((d - 5) * d + 8) * d - 4) * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def plan_axis(axis: int, in_len: int, out_len: int, scale: float, *, mode: str,
              coordinate_mode: str, nearest_mode: str, cubic_a: float,
              exclude_outside: bool, antialias: bool, roi=(0.0, 1.0)) -> AxisPlan:
    x = original_coordinates(coordinate_mode, out_len, in_len, scale, *roi)
    outside = None
    if coordinate_mode == "tf_crop_and_resize":
        outside = (x < 0) | (x > in_len - 1)
        if not outside.any():
            outside = None
    # base + ratio = x with ratio in (0, 1]: the element left of x is preferred.
    base = np.ceil(x) - 1
    ratio = x - base
    if mode == "nearest":
        if nearest_mode == "simple":
            nearest_mode = "floor" if scale >= 1 else "ceil"
        upper = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": ratio == 1, "ceil": np.ones_like(ratio, bool)}[nearest_mode]
        index = np.clip(base + upper, 0, in_len - 1).astype(np.int64)
        plan = AxisPlan(axis, in_len, index, None, outside)
    else:
        radius, kernel = (1, lambda d: np.maximum(0.0, 1 - np.abs(d))) if mode == "linear" \
            else (2, lambda d: _keys(d, cubic_a))
        step = min(scale, 1.0) if antialias else 1.0
        start = int(np.floor(-radius / step) + 1)
        offsets = np.arange(start, 2 - start)
        weights = kernel((offsets[None, :] - ratio[:, None]) * step)
        if antialias:
            weights = weights / weights.sum(axis=1, keepdims=True)
        positions = base.astype(np.int64)[:, None] + offsets[None, :]
        if exclude_outside:
            weights = np.where((positions < 0) | (positions >= in_len), 0.0, weights)
            weights = weights / weights.sum(axis=1, keepdims=True)
        matrix = np.zeros((out_len, in_len))
        rows = np.broadcast_to(np.arange(out_len)[:, None], positions.shape)
        np.add.at(matrix, (rows, np.clip(positions, 0, in_len - 1)), weights)
        plan = AxisPlan(axis, in_len, None, matrix, outside)
    return plan


def _cast(values: np.ndarray, dtype) -> np.ndarray:
    """float64 results in ``dtype``; integers rounded to nearest and saturated."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    if dtype == np.bool_:
        return values != 0
    return values.astype(dtype, copy=False)


def outside_mask(plans, shape) -> np.ndarray | None:
    """Where the output takes the extrapolation value (tf_crop_and_resize outside the
    roi), broadcast to ``shape``; None where nothing does."""
    mask = None
    for plan in plans:
        if plan.outside is None:
            continue
        view = [1] * len(shape)
        view[plan.axis] = shape[plan.axis]
        axis_mask = plan.outside.reshape(view)
        mask = axis_mask if mask is None else mask | axis_mask
    return None if mask is None else np.broadcast_to(mask, shape)


def apply_forward(X: np.ndarray, plans, extrapolation_value: float) -> np.ndarray:
    Y = X
    interpolated = False
    for plan in plans:
        if plan.index is not None:
            Y = np.take(Y, plan.index, axis=plan.axis)
        else:
            if not interpolated:
                Y = Y.astype(np.float64)
                interpolated = True
            Y = np.moveaxis(np.tensordot(plan.weights, Y, axes=([1], [plan.axis])), 0,
                            plan.axis)
    if interpolated:
        Y = _cast(Y, X.dtype)
    mask = outside_mask(plans, Y.shape)
    if mask is not None:
        Y = np.where(mask, np.asarray(extrapolation_value).astype(X.dtype), Y)
    return np.ascontiguousarray(Y)


def apply_backward(dY: np.ndarray, plans, dtype) -> np.ndarray:
    mask = outside_mask(plans, dY.shape)
    dX = np.where(mask, 0, dY) if mask is not None else dY
    for plan in reversed(plans):
        dX = np.moveaxis(np.tensordot(plan.matrix.T.astype(dtype), dX,
                                      axes=([1], [plan.axis])), 0, plan.axis)
    return np.ascontiguousarray(dX.astype(dtype, copy=False))


def check_choice(op: str, name: str, value, choices) -> str:
    value = value.decode() if isinstance(value, bytes) else value
    if value not in choices:
        raise UnsupportedError(f"{op}: {name}={value!r} is not one of {choices}")
    return value


def output_scales_and_sizes(op: str, shape: tuple, axes: list, scales, sizes,
                            policy: str) -> tuple[list, list]:
    """(scale, output length) of every axis in ``axes``, from ``scales`` or ``sizes``
    (with keep_aspect_ratio_policy)."""
    if (scales is None) == (sizes is None):
        raise ShapeError(f"{op}: exactly one of the inputs scales and sizes must be given "
                         f"(non-empty), got {'both' if scales is not None else 'neither'}")
    if scales is not None:
        scales = [float(s) for s in np.asarray(scales, np.float64).ravel()]
        if len(scales) != len(axes):
            per = "axis in axes" if len(axes) < len(shape) else "axis of X"
            raise ShapeError(f"{op}: scales has {len(scales)} values; it needs {len(axes)} "
                             f"(one per {per})")
        if any(s <= 0 for s in scales):
            raise ShapeError(f"{op}: scales {scales} must all be positive")
        lengths = [int(shape[a] * s) for a, s in zip(axes, scales)]
        if any(n < 1 for n in lengths):
            raise ShapeError(f"{op}: scales {scales} shrink an axis of X {list(shape)} to "
                             f"nothing")
        return scales, lengths
    sizes = [int(s) for s in np.asarray(sizes).ravel()]
    if len(sizes) != len(axes):
        raise ShapeError(f"{op}: sizes has {len(sizes)} values; it needs {len(axes)}")
    if any(s < 1 for s in sizes):
        raise ShapeError(f"{op}: sizes {sizes} must all be >= 1")
    scales = [s / shape[a] for a, s in zip(axes, sizes)]
    if policy == "stretch":
        return scales, sizes
    scale = min(scales) if policy == "not_larger" else max(scales)
    # Rounded half up, as the spec's round() of the output size.
    return [scale] * len(axes), [int(np.floor(scale * shape[a] + 0.5)) for a in axes]


POLICIES = ("stretch", "not_larger", "not_smaller")
RESIZE_DEFAULTS = {"antialias": 0, "axes": None,
                   "coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.75,
                   "exclude_outside": 0, "extrapolation_value": 0.0,
                   "keep_aspect_ratio_policy": "stretch", "mode": "nearest",
                   "nearest_mode": "round_prefer_floor"}


def given(value):
    """An optional input, None when omitted or empty (older exporters pass empty ones)."""
    return None if value is None or np.size(value) == 0 else np.asarray(value)


def upsample_mode(mode) -> str:
    """Upsample's mode in Resize's words ('bilinear', opset 1's name, is 'linear')."""
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear"):
        raise UnsupportedError(f"Upsample: mode={mode!r} must be 'nearest' or 'linear'")
    return mode


def plans_from(op_type: str, attributes: dict, shape, inputs) -> list:
    """The plans of a Resize or Upsample node with ``attributes`` (missing ones take
    ONNX's defaults) for an input X of ``shape`` and its other inputs (roi, scales,
    sizes for Resize-11+; scales for Resize-10 and Upsample), as arrays or None.
    Axes that stay as they are get no plan."""
    attributes = {k: v for k, v in attributes.items() if v is not None}
    if op_type == "Upsample":
        attributes = {**RESIZE_DEFAULTS, "mode": upsample_mode(attributes.get("mode",
                                                                              "nearest"))}
        if not inputs or inputs[0] is None:
            raise ShapeError("Upsample: the input scales is required")
        scales = np.asarray(inputs[0], np.float64).ravel()
        if scales.size != len(shape):
            raise ShapeError(f"Upsample: scales has {scales.size} values; X of shape "
                             f"{list(shape)} needs {len(shape)}")
        if np.any(scales < 1):
            raise ShapeError(f"Upsample: scales {scales.tolist()} must all be >= 1")
        return resize_plans(op_type, attributes, shape, scales=scales, legacy=True)
    attributes = {**RESIZE_DEFAULTS, **attributes}
    # Resize-10 took (X, scales); from opset 11 the second input is roi, and scales or
    # sizes follow it, so one input after X, non-empty, means Resize-10.
    if len(inputs) == 1 and given(inputs[0]) is not None:
        return resize_plans(op_type, attributes, shape, scales=inputs[0], legacy=True)
    return resize_plans(op_type, attributes, shape, *inputs)


def resize_plans(name: str, attributes: dict, shape, roi=None, scales=None, sizes=None,
                 legacy: bool = False) -> list:
    """The per-axis plans of Resize (every attribute in ``attributes``); ``legacy``:
    Resize-10 and Upsample, asymmetric coordinates and 'simple' nearest rounding."""
    shape = tuple(int(n) for n in shape)
    rank = len(shape)
    if rank < 1:
        raise ShapeError(f"{name}: X must have at least one axis, got a scalar")
    mode = check_choice(name, "mode", attributes["mode"], MODES)
    coordinate_mode = check_choice(name, "coordinate_transformation_mode",
                                   attributes["coordinate_transformation_mode"],
                                   COORDINATE_MODES)
    nearest_mode = check_choice(name, "nearest_mode", attributes["nearest_mode"],
                                NEAREST_MODES)
    policy = check_choice(name, "keep_aspect_ratio_policy",
                          attributes["keep_aspect_ratio_policy"], POLICIES)
    if legacy:
        coordinate_mode, nearest_mode = "asymmetric", "simple"
    axes = attributes["axes"]
    axes = list(range(rank)) if axes is None else distinct_axes(
        name, axes, rank, f"X of shape {list(shape)}")
    scales, sizes = given(scales), given(sizes)
    scale_list, lengths = output_scales_and_sizes(name, shape, axes, scales, sizes,
                                                  policy if sizes is not None else "stretch")
    roi = given(roi)
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
        if np.isclose(scale, 1.0) and length == shape[axis] and axis_roi == (0.0, 1.0):
            continue   # an axis kept as it is (even where a mode would shift it)
        plan = plan_axis(axis, shape[axis], length, scale, mode=mode,
                         coordinate_mode=coordinate_mode, nearest_mode=nearest_mode,
                         cubic_a=float(attributes["cubic_coeff_a"]),
                         exclude_outside=bool(attributes["exclude_outside"]),
                         antialias=bool(attributes["antialias"]), roi=axis_roi)
        if not _identity(plan, shape[axis]):
            plans.append(plan)
    return plans


def _identity(plan, in_len) -> bool:
    if plan.outside is not None:
        return False
    if plan.index is not None:
        return len(plan.index) == in_len and np.array_equal(plan.index, np.arange(in_len))
    return plan.weights.shape == (in_len, in_len) and np.array_equal(plan.weights,
                                                                    np.eye(in_len))
