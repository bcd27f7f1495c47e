"""The resample family in PyTorch: Resize and Upsample, AffineGrid and GridSample.

Resize reads its interpolation plans (per resized axis, an index for nearest or an
(output, input) weight matrix for linear and cubic, with every coordinate mode,
exclude_outside, antialias and tf_crop_and_resize extrapolation) from
``deep500/utils/onnx_interop/resize.py``, where ONNX's Resize semantics are written once
for every executor; they depend only on the input's shape and the constant
roi/scales/sizes, and are applied here with ``index_select`` and ``tensordot``.
https://onnx.ai/onnx/operators/onnx__Resize.html
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.pytorch._torch_common import text
from deep500.utils.errors import require
from deep500.utils.onnx_interop.resize import RESIZE_DEFAULTS, plans_from

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

_GRID_MODES = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest",
               "cubic": "bicubic", "bicubic": "bicubic"}


class ResizePlans:
    """The plans of one Resize (or Upsample) node, cached per input shape and constant
    inputs."""

    def __init__(self, attributes: dict, op_type: str = "Resize"):
        self.op_type = op_type
        self.attributes = {k: v for k, v in attributes.items()
                           if v is not None and (k in RESIZE_DEFAULTS or k == "mode")}
        self.extrapolation = float(self.attributes.get(
            "extrapolation_value", RESIZE_DEFAULTS["extrapolation_value"]))
        self._cache: dict = {}

    def plans(self, shape, inputs):
        """The plans for X of ``shape`` and the (roi, scales, sizes) ``inputs`` (arrays,
        tensors or None), as ``onnx_interop.resize.plans_from`` computes them."""
        arrays = [None if v is None else
                  np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v)
                  for v in inputs]
        key = (tuple(shape),) + tuple(None if a is None else
                                      (a.dtype.str, tuple(a.ravel().tolist()))
                                      for a in arrays)
        plans = self._cache.get(key)
        if plans is None:
            plans = plans_from(self.op_type, self.attributes, tuple(shape), arrays)
            if len(self._cache) < 64:
                self._cache[key] = plans
        return plans


def apply_resize(x, plans, extrapolation_value: float):
    """Y from X by ``plans`` (see ``onnx_interop.resize.AxisPlan``)."""
    integer = not x.is_floating_point()
    y = x.double() if integer else x
    outside = None
    for plan in plans:
        if plan.index is not None:
            index = torch.as_tensor(plan.index, dtype=torch.int64, device=x.device)
            y = y.index_select(plan.axis, index)
        else:
            weights = torch.as_tensor(plan.weights, dtype=y.dtype, device=x.device)
            y = torch.movedim(torch.tensordot(weights, y, dims=([1], [plan.axis])), 0,
                              plan.axis)
        if plan.outside is not None:
            view = [1] * x.dim()
            view[plan.axis] = len(plan.outside)
            mask = torch.as_tensor(plan.outside, device=x.device).reshape(view)
            outside = mask if outside is None else outside | mask
    if integer:
        info = torch.iinfo(x.dtype) if x.dtype != torch.bool else None
        y = torch.round(y)
        y = (y != 0) if info is None else torch.clamp(y, info.min, info.max).to(x.dtype)
    if outside is not None:
        y = torch.where(outside, torch.full((), extrapolation_value, dtype=y.dtype,
                                            device=y.device), y)
    return y


class ResampleOps:
    """``visit_<op>`` of the resample family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_resize(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Resize.html (plans: ``ResizePlans``)."""
        self._resize(op, "Resize")

    def visit_upsample(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Upsample.html: Resize's asymmetric
        nearest (rounding down) or linear upsampling by ``scales``."""
        self._resize(op, "Upsample")

    def _resize(self, op, op_type):
        resize = ResizePlans(op.given_attributes, op_type)
        extrapolation = resize.extrapolation
        others = list(op.inputs[1:])
        if all(not n or n in self.known for n in others):
            constants = [None if not n else self._known(n).numpy() for n in others]
            self._emit(op, lambda x: apply_resize(
                x, resize.plans(x.shape, constants), extrapolation), op.inputs[:1])
            return

        def resize_dynamic(x, *inputs):
            return apply_resize(x, resize.plans(x.shape, list(inputs)), extrapolation)
        self._emit(op, resize_dynamic)

    def visit_affinegrid(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__AffineGrid.html by F.affine_grid (the
        same normalised coordinates, 2-D and 3-D, align_corners)."""
        align = bool(op.attributes.get("align_corners"))
        size = self._ints(op.inputs[1])
        if size is not None:
            self._emit(op, lambda theta: F.affine_grid(theta, size, align), op.inputs[:1])
            return
        self._emit(op, lambda theta, s: F.affine_grid(theta, s.tolist(), align))

    def visit_gridsample(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__GridSample.html by F.grid_sample (same
        grid layout, normalised coordinates, padding modes and align_corners)."""
        a = op.attributes
        mode = _GRID_MODES.get(text(a.get("mode"), "linear"))
        padding = text(a.get("padding_mode"), "zeros")
        if mode is None or padding not in ("zeros", "border", "reflection"):
            raise self.node_error(op, f"mode {a.get('mode')!r} / padding_mode {padding!r} "
                                  f"are not supported (linear, nearest, cubic / zeros, "
                                  f"border, reflection are)")
        align = bool(a.get("align_corners"))
        rank = self._rank(op.inputs[0])
        if mode == "bicubic" and rank is not None and rank != 4:
            raise self.node_error(op, "cubic GridSample of a volume (5-D X) has no PyTorch "
                                  "kernel; only 4-D X can use mode 'cubic'")
        self._emit(op, lambda x, grid: F.grid_sample(x, grid.to(x.dtype), mode, padding,
                                                     align))


__all__ = ["ResampleOps"]
