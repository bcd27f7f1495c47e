"""TensorFlowVisitor methods for resampling (Resize, Upsample, GridSample, AffineGrid,
MaxUnpool, Col2Im, CenterCropPad): https://onnx.ai/onnx/operators/."""
from __future__ import annotations

import itertools
import math

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.seq_common import (NodeOps, _given, _ints, _static, _text,
                                                      _wide)
from deep500.utils.errors import Deep500Error, UnsupportedError


class ResamplingOps(NodeOps):
    """``visit_<op>`` methods of the resampling operators."""

    # -- resampling ----------------------------------------------------------------
    def visit_resize(self, op, network) -> None:
        """Resize: https://onnx.ai/onnx/operators/onnx__Resize.html — every mode,
        coordinate_transformation_mode, nearest_mode, exclude_outside, antialias, axes,
        keep_aspect_ratio_policy and extrapolation_value. The interpolation is separable:
        each resized axis is an index (nearest) or an (output, input) weight matrix
        computed once per input shape by the ONNX semantics the reference executor
        every executor shares (``utils/onnx_interop/resize.py``), then a gather or a tensordot here."""
        self._resample(op, "Resize")

    def visit_upsample(self, op, network) -> None:
        """Upsample (deprecated for Resize): nearest or linear by ``scales``, Resize's
        asymmetric coordinates and floor rounding:
        https://onnx.ai/onnx/operators/onnx__Upsample.html"""
        self._resample(op, "Upsample")

    def _resample(self, op, op_type: str) -> None:
        from deep500.utils.onnx_interop.resize import outside_mask, plans_from
        attributes = dict(op.given_attributes)
        extrapolation = float(op.attributes.get("extrapolation_value") or 0.0)
        plans_cache: dict = {}

        def plans_of(x, rest):
            for name, given in zip(op.inputs[1:], rest):
                if given is not None and _static(given) is None:
                    raise self._node_error(op, f"the values of input {name!r} are computed "
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
            size = _ints(size, "size", self, op)
            spatial = size[2:]
            rank = len(spatial)
            if rank not in (2, 3) or tuple(theta.shape[1:]) != (rank, rank + 1):
                raise self._node_error(op, f"theta of shape {list(theta.shape)} and size "
                                           f"{size} must be (N, 2, 3) with a 4-D size or "
                                           f"(N, 3, 4) with a 5-D size")
            axes = [np.linspace(-1, 1, n) if align else (2 * np.arange(n) + 1) / n - 1
                    for n in spatial]
            mesh = np.meshgrid(*axes, indexing="ij")          # per spatial axis, *spatial
            base = np.stack(list(mesh[::-1]) + [np.ones(spatial)], -1).reshape(-1, rank + 1)
            grid = tf.einsum("nij,pj->npi", theta, tf.constant(base, theta.dtype))
            return tf.reshape(grid, [-1, *spatial, rank])
        self._emit_node(op, affine_grid, static=(1,))

    def visit_maxunpool(self, op, network) -> None:
        """MaxUnpool: X's values scattered to the flat positions I (from MaxPool's
        Indices) of a zero tensor of the inferred shape, placed at the start of
        ``output_shape`` when given: https://onnx.ai/onnx/operators/onnx__MaxUnpool.html"""
        a = op.attributes
        kernel = list(a["kernel_shape"])

        def max_unpool(x, indices, output_shape=None):
            rank = len(x.shape) - 2
            strides = list(a.get("strides") or [1] * rank)
            pads = list(a.get("pads") or [0] * (2 * rank))
            if len(kernel) != rank or len(strides) != rank or len(pads) != 2 * rank:
                raise self._node_error(op, f"kernel_shape {kernel}, strides {strides} and "
                                           f"pads {pads} do not fit X with {rank} spatial axes")
            inferred = list(x.shape[:2]) + [
                (n - 1) * s - (pads[i] + pads[i + rank]) + k
                for i, (n, s, k) in enumerate(zip(x.shape[2:], strides, kernel))]
            flat = tf.scatter_nd(tf.reshape(tf.cast(indices, tf.int64), [-1, 1]),
                                 tf.reshape(x, [-1]), [math.prod(inferred)])
            y = tf.reshape(flat, inferred)
            if output_shape is None:
                return y
            shape = _ints(output_shape, "output_shape", self, op)
            if len(shape) != len(inferred) or any(o < n for o, n in zip(shape, inferred)):
                raise self._node_error(op, f"output_shape {shape} must have rank "
                                           f"{len(inferred)} and be at least the inferred "
                                           f"shape {inferred} on every axis")
            return tf.pad(y, [[0, o - n] for o, n in zip(shape, inferred)])
        self._emit_node(op, max_unpool, static=(2,))

    def visit_col2im(self, op, network) -> None:
        """Col2Im: column blocks (N, C·∏block_shape, L) summed back into an image (N, C,
        *image_shape) where they overlap: https://onnx.ai/onnx/operators/onnx__Col2Im.html
        (strides, dilations, pads). A segment sum over the flat padded image, whose
        indices are computed once per shape."""
        from deep500.utils.onnx_interop.window import window_geometry
        a = op.attributes

        def col2im(cols, image_shape, block_shape):
            image, block = _ints(image_shape, "image_shape", self, op), _ints(block_shape,
                                                                          "block_shape", self,
                                                                          op)
            if len(image) != len(block) or not image:
                raise self._node_error(op, f"image_shape {image} and block_shape {block} must "
                                       f"have the same, non-zero length")
            g = window_geometry(op.op_type, image, block, strides=a.get("strides"),
                                dilations=a.get("dilations"), pads=a.get("pads"))
            taps, blocks = math.prod(block), math.prod(g.output)
            if len(cols.shape) != 3 or cols.shape[1] % taps or cols.shape[2] != blocks:
                raise self._node_error(op, f"input of shape {list(cols.shape)} must be (N, "
                                       f"C·{taps}, {blocks}) for image_shape {image}, "
                                       f"block_shape {block} and these strides, dilations "
                                       f"and pads")
            padded = [n + b + e for n, b, e in zip(image, g.pads_begin, g.pads_end)]
            # Flat padded-image index of (tap, block): Σ (k·d + o·s) · row stride.
            index = np.zeros(tuple(block) + tuple(g.output), np.int64)
            stride = 1
            for axis in reversed(range(len(image))):
                k = np.arange(block[axis]) * g.dilations[axis]
                o = np.arange(g.output[axis]) * g.strides[axis]
                view_k = [1] * (2 * len(image))
                view_k[axis] = -1
                view_o = [1] * (2 * len(image))
                view_o[len(image) + axis] = -1
                index = index + (k.reshape(view_k) + o.reshape(view_o)) * stride
                stride *= padded[axis]
            batch, channels = tf.shape(cols)[0], cols.shape[1] // taps
            data = tf.transpose(tf.reshape(cols, [batch, channels, taps * blocks]), [2, 0, 1])
            summed = tf.math.unsorted_segment_sum(data, index.reshape(-1), stride)
            y = tf.reshape(tf.transpose(summed, [1, 2, 0]), tf.concat(
                [[batch, channels], padded], 0))
            return y[(slice(None), slice(None)) + tuple(
                slice(b, b + n) for b, n in zip(g.pads_begin, image))]
        self._emit_node(op, col2im, static=(1, 2))

    def visit_centercroppad(self, op, network) -> None:
        """CenterCropPad: https://onnx.ai/onnx/operators/onnx__CenterCropPad.html (a crop
        drops ⌊d/2⌋ elements at the start, a pad adds ⌊d/2⌋ zeros there)."""
        axes_attr = op.attributes.get("axes")

        def center_crop_pad(x, shape):
            rank = len(x.shape)
            target = _ints(shape, "shape", self, op)
            axes = list(range(rank)) if axes_attr is None else [int(v) for v in axes_attr]
            if any(not -rank <= v < rank for v in axes) or len(target) != len(axes):
                raise self._node_error(op, f"axes {axes} must lie in [{-rank}, {rank - 1}] and "
                                       f"shape {target} give one size per axis")
            crop, pads = [slice(None)] * rank, [[0, 0]] * rank
            for axis, size in zip([v % rank for v in axes], target):
                length = x.shape[axis]
                if size < length:
                    start = (length - size) // 2
                    crop[axis] = slice(start, start + size)
                elif size > length:
                    start = (size - length) // 2
                    pads[axis] = [start, size - length - start]
            y = x[tuple(crop)]
            return tf.pad(y, pads) if any(p != [0, 0] for p in pads) else y
        self._emit_node(op, center_crop_pad, static=(1,))

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
            raise self._node_error(op, f"mode={mode!r} is not nearest, linear or cubic",
                                   Deep500Error)
        if padding not in ("zeros", "border", "reflection"):
            raise self._node_error(op, f"padding_mode={padding!r} is not zeros, border or "
                                   f"reflection", Deep500Error)

        def grid_sample(x, grid):
            rank = len(x.shape) - 2
            if len(grid.shape) != rank + 2 or grid.shape[-1] != rank:
                raise self._node_error(op, f"grid of shape {list(grid.shape)} does not fit X of "
                                       f"shape {list(x.shape)}: it must be (N, *out, {rank})")
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
