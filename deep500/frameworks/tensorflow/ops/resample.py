"""TensorFlowVisitor: the resample family (``deep500/frameworks/families.py``),
resampling and geometric transforms of images:
https://onnx.ai/onnx/operators/onnx__Resize.html, .../onnx__Upsample.html, .../onnx__GridSample.html, .../onnx__AffineGrid.html. Resize's
interpolation plans come from the ONNX semantics every executor shares
(``deep500.utils.onnx_interop.resize``); GridSample samples with differentiable weights.
"""
from __future__ import annotations

import itertools

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _text
from deep500.frameworks.tensorflow.ops._values import (_given, _known_value, _required_ints,
                                                       _wide)
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from deep500.utils.onnx_interop.resize import outside_mask, plans_from


class ResampleOps:
    """``visit_<op>`` of the resample family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_resize(self, op, network) -> None:
        """Resize: https://onnx.ai/onnx/operators/onnx__Resize.html — every mode,
        coordinate_transformation_mode, nearest_mode, exclude_outside, antialias, axes,
        keep_aspect_ratio_policy and extrapolation_value. The interpolation is separable:
        each resized axis is an index (nearest) or an (output, input) weight matrix
        computed once per input shape by the ONNX semantics every executor shares
        (``utils/onnx_interop/resize.py``), then a gather or a tensordot here."""
        self._resample(op, "Resize")

    def visit_upsample(self, op, network) -> None:
        """Upsample (deprecated for Resize): nearest or linear by ``scales``, Resize's
        asymmetric coordinates and floor rounding:
        https://onnx.ai/onnx/operators/onnx__Upsample.html"""
        self._resample(op, "Upsample")

    def _resample(self, op, op_type: str) -> None:
        attributes = dict(op.given_attributes)
        extrapolation = float(op.attributes.get("extrapolation_value") or 0.0)
        plans_cache: dict = {}

        def plans_of(x, rest):
            for name, given in zip(op.inputs[1:], rest):
                if given is not None and _known_value(given) is None:
                    raise self.node_error(op, f"the values of input {name!r} are computed "
                                          f"at run time inside a traced function; use "
                                          f"mode='eager'", UnsupportedError)
            values = [_given(r) for r in rest]
            key = (tuple(x.shape), tuple(None if v is None else (v.dtype.str, v.tobytes())
                                         for v in values))
            if key not in plans_cache:
                plans_cache[key] = plans_from(op_type, attributes, tuple(x.shape), values)
            return plans_cache[key]

        def resize(x, *rest):
            plans = plans_of(x, rest)
            integer = not x.dtype.is_floating
            y = tf.cast(x, tf.float64) if integer else _wide(x)
            for plan in plans:
                if plan.index is not None:
                    y = tf.gather(y, plan.index, axis=plan.axis)
                    continue
                moved = tf.tensordot(tf.constant(plan.weights, y.dtype), y,
                                     [[1], [plan.axis]])
                rank = len(y.shape)
                perm = list(range(1, plan.axis + 1)) + [0] + list(range(plan.axis + 1, rank))
                y = tf.transpose(moved, perm)
            if integer:
                y = tf.saturate_cast(tf.round(y), x.dtype)
            else:
                y = tf.cast(y, x.dtype)
            outside = outside_mask(plans, tuple(y.shape))
            if outside is not None:
                y = tf.where(outside, tf.constant(extrapolation, y.dtype), y)
            return y
        self._emit_node(op, resize, static=(1, 2, 3))

    def visit_affinegrid(self, op, network) -> None:
        """AffineGrid: the sampling grid (N, *size, rank) of affine matrices theta (N,
        rank, rank + 1) over normalised output coordinates in [-1, 1] (pixel centres, or
        corners with align_corners), x (the last axis) first:
        https://onnx.ai/onnx/operators/onnx__AffineGrid.html"""
        align = bool(op.attributes.get("align_corners") or 0)

        def affine_grid(theta, size):
            size = _required_ints(size, "size", self, op)
            spatial = size[2:]
            rank = len(spatial)
            if rank not in (2, 3) or tuple(theta.shape[1:]) != (rank, rank + 1):
                raise self.node_error(op, f"theta of shape {list(theta.shape)} and size "
                                          f"{size} must be (N, 2, 3) with a 4-D size or "
                                          f"(N, 3, 4) with a 5-D size", ShapeError)
            axes = [np.linspace(-1, 1, n) if align else (2 * np.arange(n) + 1) / n - 1
                    for n in spatial]
            mesh = np.meshgrid(*axes, indexing="ij")          # per spatial axis, *spatial
            base = np.stack(list(mesh[::-1]) + [np.ones(spatial)], -1).reshape(-1, rank + 1)
            grid = tf.einsum("nij,pj->npi", theta, tf.constant(base, theta.dtype))
            return tf.reshape(grid, [-1, *spatial, rank])
        self._emit_node(op, affine_grid, static=(1,))

    def visit_gridsample(self, op, network) -> None:
        """GridSample: https://onnx.ai/onnx/operators/onnx__GridSample.html — nearest,
        (multi-)linear or (multi-)cubic (Keys, a = -0.75) sampling of X (N, C, *spatial)
        at grid (N, *out, rank) (coordinates x, y[, z] in [-1, 1]), padding zeros, border
        or reflection, align_corners; differentiable in X and (linear, cubic) grid."""
        a = op.attributes
        names = {"bilinear": "linear", "bicubic": "cubic"}
        mode = _text(a.get("mode"), "linear")
        mode = names.get(mode, mode)
        padding = _text(a.get("padding_mode"), "zeros")
        align = bool(a.get("align_corners") or 0)
        if mode not in ("nearest", "linear", "cubic"):
            raise self.node_error(op, f"mode={mode!r} is not nearest, linear or cubic",
                                  Deep500Error)
        if padding not in ("zeros", "border", "reflection"):
            raise self.node_error(op, f"padding_mode={padding!r} is not zeros, border or "
                                  f"reflection", Deep500Error)

        def grid_sample(x, grid):
            rank = len(x.shape) - 2
            if len(grid.shape) != rank + 2 or grid.shape[-1] != rank:
                raise self.node_error(op, f"grid of shape {list(grid.shape)} does not fit X of "
                                      f"shape {list(x.shape)}: it must be (N, *out, {rank})",
                                      ShapeError)
            work = tf.float64 if x.dtype == tf.float64 else tf.float32
            g_all = tf.cast(grid, work)
            per_axis = []
            for axis in range(rank):
                size = x.shape[2 + axis]
                g = g_all[..., rank - 1 - axis]
                pos = (g + 1) * (size - 1) / 2 if align else ((g + 1) * size - 1) / 2
                low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
                if mode == "nearest":
                    pos = tf.round(pos)
                if padding == "border":
                    pos = tf.clip_by_value(pos, 0.0, size - 1.0)
                elif padding == "reflection":
                    pos = _reflect(pos, low, high)
                if mode == "nearest":
                    offsets, base = [0], tf.stop_gradient(tf.math.floor(pos))
                    weights = [tf.ones_like(pos)]
                else:
                    base = tf.stop_gradient(tf.math.floor(pos))
                    t = pos - base
                    if mode == "linear":
                        offsets, weights = [0, 1], [1 - t, t]
                    else:
                        offsets = [-1, 0, 1, 2]
                        weights = [_keys(t + 1), _keys(t), _keys(1 - t), _keys(2 - t)]
                taps = []
                for offset, w in zip(offsets, weights):
                    index = base + offset
                    if padding == "zeros":
                        valid = (index >= 0) & (index < size)
                        w = tf.where(valid, w, tf.zeros_like(w))
                        index = tf.clip_by_value(index, 0, size - 1)
                    elif padding == "border":
                        index = tf.clip_by_value(index, 0, size - 1)
                    else:
                        index = _reflect(index, low, high)
                    taps.append((tf.cast(index, tf.int32), w))
                per_axis.append(taps)
            channels_last = tf.transpose(x, [0] + list(range(2, rank + 2)) + [1])
            y = None
            for combo in itertools.product(*per_axis):
                weight = combo[0][1]
                for _, w in combo[1:]:
                    weight = weight * w
                index = tf.stack([i for i, _ in combo], -1)
                values = tf.gather_nd(channels_last, index, batch_dims=1)   # (N, *out, C)
                term = tf.cast(weight, values.dtype)[..., tf.newaxis] * values
                y = term if y is None else y + term
            return tf.transpose(y, [0, rank + 1] + list(range(1, rank + 1)))
        self._emit_node(op, grid_sample)


def _keys(d, a: float = -0.75):
    """The cubic convolution kernel of Keys (1981) at distances d."""
    d = tf.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = (((d - 5) * d + 8) * d - 4) * a
    return tf.where(d <= 1, near, tf.where(d < 2, far, tf.zeros_like(d)))


def _reflect(x, low: float, high: float):
    """x reflected at the borders until it lies in [low, high] (GridSample's
    reflection padding); differentiable in x."""
    span = high - low
    below, above = x < low, x > high
    distance = tf.where(below, low - x, tf.where(above, x - high, tf.zeros_like(x)))
    flips = tf.stop_gradient(tf.math.floor(distance / span)) if span > 0 else \
        tf.zeros_like(distance)
    rest = distance - flips * span
    even = tf.math.floormod(flips, 2) == 0
    from_low = tf.where(even, low + rest, high - rest)
    from_high = tf.where(even, high - rest, low + rest)
    return tf.where(below, from_low, tf.where(above, from_high, x))
