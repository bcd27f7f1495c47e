"""TensorFlowVisitor: the shape family (``deep500/frameworks/families.py``), reshaping,
joining, splitting, slicing and padding: https://onnx.ai/onnx/operators/. Constant
operands stay NumPy, so that shape computations cost no TensorFlow operations; Concat,
Transpose and Shape work on channels-last tensors through remapped axes, and a Flatten
read by one Gemm stays a reshape of the channels-last tensor.
"""
from __future__ import annotations

import math

import numpy as np

from deep500.frameworks.tensorflow._layout import (CHANNELS_LAST, channels_last_axis, FLAT,
                                                   ONNX_LAYOUT, to_onnx_layout, to_onnx_perm)
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr, _text
from deep500.frameworks.tensorflow.ops._values import (_axis, _dims, _ints, _is_np,
                                                       _required_ints, _shape_list, _static,
                                                       _tf_dtype)
from deep500.utils.errors import ShapeError


def _clamped_slice(start: int, end: int, step: int, dim: int | None) -> slice:
    """A Python slice with ONNX Slice's clamping of ``start``/``end`` on an axis of
    length ``dim``."""
    if step == 0:
        raise ShapeError("Slice: steps must be non-zero")
    if dim is None:
        return slice(start, end, step)
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return slice(start, end, step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def _pad(x, per_axis, mode, fill):
    """ONNX Pad on ``x`` with per-axis [begin, end] widths (negative widths crop)."""
    crop = [slice(-b if b < 0 else None, e if e < 0 else None) for b, e in per_axis]
    grow = [[max(b, 0), max(e, 0)] for b, e in per_axis]
    if any(b < 0 or e < 0 for b, e in per_axis):
        x = x[tuple(crop)]
    if not any(b or e for b, e in grow):
        return x
    if mode == "constant":
        if fill is None:
            fill = 0
        elif not isinstance(fill, (int, float)):
            fill = tf.reshape(tf.cast(fill, _tf_dtype(x)), [])
        return tf.pad(x, grow, constant_values=fill)
    if mode == "reflect":
        return tf.pad(x, grow, mode="REFLECT")
    for axis, (begin, end) in enumerate(grow):
        if not (begin or end):
            continue
        dim = x.shape[axis]
        positions = np.arange(-begin, dim + end)
        positions = np.clip(positions, 0, dim - 1) if mode == "edge" else positions % dim
        x = tf.gather(x, positions, axis=axis)
    return x


def _dynamic_reshape_target(x, shape, allow_zero):
    """Reshape's target computed at run time: 0 copies the input's dimension
    unless ``allow_zero``."""
    shape = tf.cast(shape, tf.int64)
    if allow_zero:
        return shape
    n = tf.size(shape)
    current = tf.concat([tf.shape(x, out_type=tf.int64), tf.zeros([n], tf.int64)], 0)[:n]
    return tf.where(tf.equal(shape, 0), current, shape)


class ShapeOps:
    """``visit_<op>`` of the shape family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _flatten_into_gemm(self, op) -> bool:
        """Flatten a channels-last (N, d..., C) tensor as is, when its only reader is a
        Gemm whose weight (read by it alone) can be stored to match."""
        x, out = op.inputs[0], op.outputs[0]
        shape = self.network.shapes.get(x)
        rank = self.rank(x)
        if (not self.propagate_layout or self.layout(x) != CHANNELS_LAST or rank is None
                or _axis(int(op.attributes["axis"]), rank) != 1 or shape is None
                or not all(isinstance(d, int) and d > 0 for d in shape[1:])
                or out in self.network.outputs):
            return False
        uses = self.consumers.get(out, [])
        if len(uses) != 1:
            return False
        gemm, index = uses[0]
        if gemm.op_type != "Gemm" or index != 0 or gemm.attributes["transA"]:
            return False
        w_name = gemm.inputs[1]
        if not self._only_consumed_as(w_name, lambda use, i: use is gemm and i == 1):
            return False
        channels, spatial = shape[1], tuple(shape[2:])
        self.flattened[out] = (channels, spatial)

        def flatten_channels_last(x):
            return tf.reshape(x, [-1, channels * math.prod(spatial)])

        def to_onnx(flat):   # for readers outside the plan (fetch_tensor)
            return tf.reshape(to_onnx_layout(tf.reshape(flat, [-1, *spatial, channels])),
                              [-1, channels * math.prod(spatial)])
        self._emit(flatten_channels_last, [self.key(x, CHANNELS_LAST)], out + FLAT)
        self.plan.converters[out] = (out + FLAT, to_onnx)
        self.ranks[out] = 2
        return True

    def visit_flatten(self, op, network) -> None:
        """Flatten: a 2-D matrix of axes [:axis] by axes [axis:]."""
        axis = int(op.attributes["axis"])
        if self._flatten_into_gemm(op):
            return

        def flatten(x):
            dims = _dims(x)
            first = _axis(axis, len(dims))
            if None in dims:
                shape = tf.shape(x)
                outer = tf.reduce_prod(shape[:first])
                return tf.reshape(x, tf.stack([outer, tf.reduce_prod(shape[first:])]))
            shape = [math.prod(dims[:first]), math.prod(dims[first:])]
            return x.reshape(shape) if isinstance(x, np.ndarray) else tf.reshape(x, shape)
        self.emit(flatten, [self.key(op.inputs[0])], op.outputs[0], rank=2)

    def visit_reshape(self, op, network) -> None:
        """Reshape: 0 copies the input's dimension (unless allowzero), -1 is inferred."""
        allow_zero = bool(op.attributes.get("allowzero") or 0)
        inputs = [self.key(op.inputs[0]), self.key(op.inputs[1])]

        def reshape(x, shape):
            target = _static(shape)
            if target is None:
                return tf.reshape(x, _dynamic_reshape_target(x, shape, allow_zero))
            target = [int(t) for t in np.reshape(target, -1)]
            if not allow_zero:
                dims = _shape_list(x)
                target = [dims[i] if t == 0 else t for i, t in enumerate(target)]
            if isinstance(x, np.ndarray):
                return x.reshape(target)
            return tf.reshape(x, target)
        self.emit(reshape, inputs, op.outputs[0])

    def visit_transpose(self, op, network) -> None:
        """Transpose: perm (default: reversed axes); a channels-last input is permuted
        straight to the result."""
        x = op.inputs[0]
        perm = op.attributes.get("perm")
        rank = self.rank(x)
        if perm is None and rank is None:
            def reverse(x):
                axes = list(range(len(x.shape)))[::-1]
                return np.transpose(x, axes) if isinstance(x, np.ndarray) else tf.transpose(
                    x, axes)
            self.emit(reverse, [self.key(x)], op.outputs[0])
            return
        perm = [int(p) for p in perm] if perm is not None else list(range(rank))[::-1]
        if self.layout(x) == CHANNELS_LAST and self.propagate_layout:
            composed = [channels_last_axis(p, len(perm)) for p in perm]
            key = self.key(x, CHANNELS_LAST)
        else:
            composed, key = perm, self.key(x)
        if composed == list(range(len(composed))):
            self.emit(lambda x: x, [key], op.outputs[0], rank=len(perm))
            return

        def transpose(x):
            if isinstance(x, np.ndarray):
                return np.transpose(x, composed)
            return tf.transpose(x, composed)
        self.emit(transpose, [key], op.outputs[0], rank=len(perm))

    def visit_concat(self, op, network) -> None:
        """Concat along ``axis`` (channels-last inputs concatenate there)."""
        axis = int(op.attributes["axis"] if op.attributes.get("axis") is not None else 1)
        names = op.inputs
        ranks = [self.rank(n) for n in names]
        rank = self._channels_last_rank(names)
        if rank is not None and all(r == rank for r in ranks):
            inner = channels_last_axis(axis, rank)
            self.emit(lambda *xs: tf.concat(xs, inner),
                      [self.key(n, CHANNELS_LAST) for n in names], op.outputs[0],
                      CHANNELS_LAST, rank)
            return

        def concat(*xs):
            if _is_np(*xs):
                return np.concatenate(xs, axis)
            return tf.concat(xs, axis)
        self.emit(concat, [self.key(n) for n in names], op.outputs[0],
                  rank=ranks[0] if ranks else None)

    def visit_split(self, op, network) -> None:
        """Split into the sizes of the ``split`` input, else ``num_outputs`` ceil-sized
        parts (equal parts, one per output, if neither is given)."""
        axis = int(op.attributes.get("axis") or 0)
        parts = len(op.outputs)
        sizes = None
        inputs = [self.key(op.inputs[0])] + [self.static_key(n) for n in op.inputs[1:2]]
        num_outputs = op.attributes.get("num_outputs")
        dynamic_error = self._dynamic_error(op, "split sizes")

        def split(x, split_input=None):
            given = sizes if split_input is None else _ints(split_input)
            if given is None and split_input is not None:
                raise dynamic_error
            if not given:
                dim = x.shape[_axis(axis, len(x.shape))]
                if num_outputs:
                    chunk = -(-dim // num_outputs)
                    given = [chunk] * (num_outputs - 1) + [dim - chunk * (num_outputs - 1)]
                else:
                    given = [dim // parts] * parts
            return tuple(tf.split(x, given, axis))
        self.emit(split, inputs, list(op.outputs))

    def visit_squeeze(self, op, network) -> None:
        """Squeeze the axes of the second input, else every size-1 axis."""
        axes, dynamic = self._axes_input(op)
        inputs = [self.key(op.inputs[0])] + ([self.key(dynamic)] if dynamic else [])

        def squeeze(x, axes_input=None):
            chosen = axes if axes_input is None else _ints(axes_input)
            rank = len(x.shape)
            if chosen is None:
                chosen = [i for i, d in enumerate(_dims(x)) if d == 1]
            chosen = sorted(_axis(a, rank) for a in chosen)
            if isinstance(x, np.ndarray):
                return np.squeeze(x, tuple(chosen))
            return tf.squeeze(x, chosen) if chosen else x
        self.emit(squeeze, inputs, op.outputs[0])

    def visit_unsqueeze(self, op, network) -> None:
        """Unsqueeze: insert size-1 axes (attribute before opset 13, input after)."""
        axes, dynamic = self._axes_input(op)
        inputs = [self.key(op.inputs[0])] + ([self.key(dynamic)] if dynamic else [])
        dynamic_error = self._dynamic_error(op, "axes")

        def unsqueeze(x, axes_input=None):
            chosen = axes if axes_input is None else _ints(axes_input)
            if chosen is None:
                raise dynamic_error
            rank = len(x.shape) + len(chosen)
            chosen = sorted(_axis(a, rank) for a in chosen)
            if isinstance(x, np.ndarray):
                return np.expand_dims(x, tuple(chosen))
            dims = _shape_list(x)
            for a in chosen:
                dims.insert(a, 1)
            return tf.reshape(x, dims)
        self.emit(unsqueeze, inputs, op.outputs[0])

    def visit_shape(self, op, network) -> None:
        """Shape (with start/end from opset 15), as int64; static shapes stay NumPy."""
        x = op.inputs[0]
        start = op.attributes.get("start") or 0
        end = op.attributes.get("end")
        channels_last = self.layout(x) == CHANNELS_LAST and self.propagate_layout

        def shape(x):
            dims = _dims(x)
            order = to_onnx_perm(len(dims)) if channels_last else range(len(dims))
            dims = [dims[i] for i in order][start:end]
            if None not in dims:
                return np.asarray(dims, np.int64)
            return tf.gather(tf.shape(x, out_type=tf.int64), list(order))[start:end]
        self.emit(shape, [self.key(x, CHANNELS_LAST if channels_last else ONNX_LAYOUT)],
                  op.outputs[0], rank=1)

    def visit_size(self, op, network) -> None:
        def size(x):
            dims = _dims(x)
            if None not in dims:
                return np.asarray(math.prod(dims), np.int64)
            return tf.size(x, out_type=tf.int64)
        self.emit(size, [self.key(op.inputs[0], self.layout(op.inputs[0]))], op.outputs[0],
                  rank=0)

    def visit_slice(self, op, network) -> None:
        """Slice: starts/ends/axes/steps inputs; bounds clamped as ONNX specifies."""
        inputs = [self.key(op.inputs[0])] + [self.static_key(n) for n in op.inputs[1:]]
        dynamic_error = self._dynamic_error(op, "slice bounds")

        def slice_(x, *bounds):
            values = [_ints(b) if b is not None else None for b in bounds]
            values += [None] * (4 - len(values))
            if any(v is None for v, b in zip(values, bounds) if b is not None):
                raise dynamic_error
            starts, ends, axes, steps = values
            dims = _dims(x)
            rank = len(dims)
            axes = list(range(len(starts))) if axes is None else [_axis(a, rank) for a in axes]
            steps = [1] * len(starts) if steps is None else steps
            index = [slice(None)] * rank
            for axis, start, end, step in zip(axes, starts, ends, steps):
                index[axis] = _clamped_slice(start, end, step, dims[axis])
            return x[tuple(index)]
        self.emit(slice_, inputs, op.outputs[0])

    def visit_expand(self, op, network) -> None:
        """Expand: broadcast the input and ``shape`` against each other."""
        def expand(x, shape):
            target = _ints(shape)
            dims = _dims(x)
            if target is not None and None not in dims:
                full = list(np.broadcast_shapes(tuple(dims), tuple(target)))
                if isinstance(x, np.ndarray):
                    return np.broadcast_to(x, full).copy()
                return x if full == dims else tf.broadcast_to(x, full)
            return tf.broadcast_to(x, tf.broadcast_dynamic_shape(
                tf.shape(x, out_type=tf.int64), tf.cast(shape, tf.int64)))
        self.emit(expand, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_pad(self, op, network) -> None:
        """Pad: modes constant, reflect, edge (and wrap); negative pads crop."""
        mode = op.attributes.get("mode") or "constant"
        if mode not in ("constant", "reflect", "edge", "wrap"):
            raise self.node_error(op, f"pad mode {mode!r} is not supported")
        inputs = [self.key(op.inputs[0]), self.static_key(op.inputs[1])]
        inputs += [self.key(n) for n in op.inputs[2:3]]
        inputs += [self.static_key(n) for n in op.inputs[3:4]]
        dynamic_error = self._dynamic_error(op, "pads")

        def pad(x, pads, value=None, axes=None):
            widths = _ints(pads)
            if widths is None or (axes is not None and _ints(axes) is None):
                raise dynamic_error
            rank = len(x.shape)
            chosen = (list(range(rank)) if axes is None
                      else [_axis(a, rank) for a in _ints(axes)])
            n = len(chosen)
            per_axis = [[0, 0] for _ in range(rank)]
            for i, a in enumerate(chosen):
                per_axis[a] = [widths[i], widths[n + i]]
            return _pad(x, per_axis, mode, value)
        self.emit(pad, inputs, op.outputs[0], rank=self.rank(op.inputs[0]))

    def visit_centercroppad(self, op, network) -> None:
        """CenterCropPad: https://onnx.ai/onnx/operators/onnx__CenterCropPad.html (a crop
        drops ⌊d/2⌋ elements at the start, a pad adds ⌊d/2⌋ zeros there)."""
        axes_attr = op.attributes.get("axes")

        def center_crop_pad(x, shape):
            rank = len(x.shape)
            target = _required_ints(shape, "shape", self, op)
            axes = list(range(rank)) if axes_attr is None else [int(v) for v in axes_attr]
            if any(not -rank <= v < rank for v in axes) or len(target) != len(axes):
                raise self.node_error(op, f"axes {axes} must lie in [{-rank}, {rank - 1}] and "
                                      f"shape {target} give one size per axis", ShapeError)
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

    def visit_trilu(self, op, network) -> None:
        """Trilu: the upper (or lower) triangle of the last two axes, from diagonal k."""
        upper = bool(_attr(op, "upper", 1))
        inputs = [self.key(op.inputs[0])] + [self.key(n) for n in op.inputs[1:2] if n]

        def trilu(x, k=None):
            x = tf.convert_to_tensor(x)
            shift = tf.constant(0, tf.int64) if k is None else tf.reshape(
                tf.cast(k, tf.int64), [])
            dims = tf.shape(x, out_type=tf.int64)
            rows = tf.range(dims[-2])[:, None]
            cols = tf.range(dims[-1])[None, :]
            keep = cols - rows >= shift if upper else cols - rows <= shift
            return tf.where(keep, x, tf.zeros_like(x))
        self.emit(trilu, inputs, op.outputs[0], rank=self.rank(op.inputs[0]))

    def visit_tile(self, op, network) -> None:
        """Tile: repeat the input ``repeats[i]`` times along axis i."""
        def tile(x, repeats):
            return tf.tile(x, tf.cast(repeats, tf.int64))
        self.emit(tile, [self.key(op.inputs[0]), self.key(op.inputs[1])], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def _depth_space(self, op, to_depth: bool) -> None:
        block = int(op.attributes["blocksize"])
        mode = _text(op.attributes.get("mode"), "DCR")
        if mode not in ("DCR", "CRD"):
            raise self.node_error(op, f"mode {mode!r} is not 'DCR' or 'CRD'; fix the node's "
                                      f"attribute")
        self._check_rank(op.inputs[0], 4, "the operator rearranges (N, C, H, W) tensors")

        def rearrange(x):
            x = tf.convert_to_tensor(x)
            n, c, h, w = _shape_list(x)
            if to_depth:
                split = tf.reshape(x, tf.stack([n, c, h // block, block, w // block, block]))
                perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
                return tf.reshape(tf.transpose(split, perm),
                                  tf.stack([n, c * block * block, h // block, w // block]))
            depth = c // (block * block)
            if mode == "DCR":
                split = tf.reshape(x, tf.stack([n, block, block, depth, h, w]))
                perm = [0, 3, 4, 1, 5, 2]
            else:
                split = tf.reshape(x, tf.stack([n, depth, block, block, h, w]))
                perm = [0, 1, 4, 2, 5, 3]
            return tf.reshape(tf.transpose(split, perm),
                              tf.stack([n, depth, h * block, w * block]))
        self.emit(rearrange, [self.key(op.inputs[0])], op.outputs[0], rank=4)

    def visit_spacetodepth(self, op, network) -> None:
        """SpaceToDepth: https://onnx.ai/onnx/operators/onnx__SpaceToDepth.html"""
        self._depth_space(op, True)

    def visit_depthtospace(self, op, network) -> None:
        """DepthToSpace: https://onnx.ai/onnx/operators/onnx__DepthToSpace.html"""
        self._depth_space(op, False)
