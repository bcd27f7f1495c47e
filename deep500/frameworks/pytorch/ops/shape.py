"""The shape family in PyTorch: reshaping (Flatten, Reshape, Squeeze, Unsqueeze, Expand,
Transpose, DepthToSpace, SpaceToDepth), joining and splitting (Concat, Split, Tile),
slicing and padding (Slice, Pad, CenterCropPad, Trilu), Shape and Size.
https://onnx.ai/onnx/operators/
"""
from __future__ import annotations

import math

from deep500.frameworks.pytorch._torch_common import torch_pads
from deep500.utils.errors import ShapeError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate",
              "wrap": "circular"}


def _reshape_target(shape, input_shape, allowzero):
    """ONNX Reshape's target: 0 copies the input's dimension (unless allowzero)."""
    if allowzero:
        return shape
    return [input_shape[i] if d == 0 else d for i, d in enumerate(shape)]


def _unsqueeze_fn(axes):

    def unsqueeze(x):
        rank = x.dim() + len(axes)
        for axis in sorted(a % rank for a in axes):
            x = x.unsqueeze(axis)
        return x
    return unsqueeze


def _slice(x, starts, ends, axes, steps):
    """ONNX Slice; Python's slice semantics clamp exactly as ONNX does (for negative
    steps too, via range), but torch views take positive steps only."""
    rank = x.dim()
    key = [slice(None)] * rank
    negative = []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= rank
        if step > 0:
            key[axis] = slice(start, end, step)
        else:
            negative.append((axis, range(x.shape[axis])[start:end:step]))
    x = x[tuple(key)] if any(k != slice(None) for k in key) else x
    for axis, indices in negative:
        x = x.index_select(axis, torch.tensor(list(indices), dtype=torch.int64,
                                              device=x.device))
    return x


def center_crop_pad(x, shape, axes):
    """ONNX CenterCropPad (https://onnx.ai/onnx/operators/onnx__CenterCropPad.html):
    each axis in ``axes`` cropped (start (n - target)//2) or zero-padded (before:
    (target - n)//2) to ``shape``."""
    rank = x.dim()
    axes = list(range(rank)) if not axes else [a % rank for a in axes]
    if len(shape) != len(axes):
        raise ShapeError(f"CenterCropPad: shape has {len(shape)} values; it needs one per "
                         f"axis in {axes}")
    for axis, target in zip(axes, shape):
        length = x.shape[axis]
        if target < length:
            start = (length - target) // 2
            x = x.narrow(axis, start, target)
        elif target > length:
            before = (target - length) // 2
            pad = [0, 0] * (rank - axis - 1) + [before, target - length - before]
            x = F.pad(x, pad)
    return x


def _explicit_pads(pads, axes, rank: int) -> list:
    """F.pad's pads for ONNX ``pads`` ([begin..., end...]) over ``axes`` (None: all) of
    a tensor of ``rank``."""
    chosen = list(range(rank)) if axes is None else [x % rank for x in axes]
    half = len(pads) // 2
    full = [0] * (2 * rank)
    for i, axis in enumerate(chosen):
        full[axis], full[rank + axis] = pads[i], pads[half + i]
    result = torch_pads(full)
    while result and result[-1] == 0 and result[-2] == 0:
        result = result[:-2]  # modes other than 'constant' pad only the trailing
    return result             # axes: drop the unpadded leading ones


def _pad(x, explicit, mode: str, value=None):
    """F.pad of ``x``; in 'constant' mode with ``value`` (None: 0, a number, or a
    tensor: a parameter stays differentiable)."""
    if mode != "constant":
        return F.pad(x, explicit, mode)
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            # pad(x - v) + v is x inside and v outside, and differentiable in v.
            return F.pad(x - value, explicit) + value
        value = value.item()
    return F.pad(x, explicit, "constant", 0 if value is None else value)


class ShapeOps:
    """``visit_<op>`` of the shape family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_flatten(self, op, network):
        axis = op.attributes["axis"]
        rank = self._rank(op.inputs[0])
        if axis == 1 and rank is not None and rank >= 2:
            self._emit(op, lambda x: x.flatten(1))
            return

        def flatten(x):
            start = axis % x.dim() if axis < 0 else axis
            return x.reshape(math.prod(x.shape[:start]), math.prod(x.shape[start:]))
        self._emit(op, flatten)

    def visit_reshape(self, op, network):
        allowzero = bool(op.attributes.get("allowzero"))
        shape = self._ints(op.inputs[1])
        if shape is None:
            self._emit(op, lambda x, s: x.reshape(
                _reshape_target(s.tolist(), x.shape, allowzero)))
        elif allowzero or 0 not in shape:
            target = tuple(shape)
            self._emit(op, lambda x: x.reshape(target), op.inputs[:1])
        else:
            self._emit(op, lambda x: x.reshape(_reshape_target(shape, x.shape, False)),
                       op.inputs[:1])

    def visit_transpose(self, op, network):
        perm = op.attributes["perm"]
        if perm is None:
            self._emit(op, lambda x: x.permute(tuple(reversed(range(x.dim())))))
        else:
            perm = tuple(perm)
            self._emit(op, lambda x: x.permute(perm))

    def visit_concat(self, op, network):
        axis = op.attributes["axis"]
        self._emit(op, lambda *xs: torch.cat(xs, axis))

    def visit_split(self, op, network):
        axis = op.attributes["axis"]
        count = len(op.outputs)
        sizes = self._ints(op.inputs[1]) if len(op.inputs) > 1 and op.inputs[1] else None
        if len(op.inputs) > 1 and op.inputs[1] and sizes is None:
            self._emit(op, lambda x, s: torch.split(x, s.tolist(), axis))
            return
        if count == 1:
            self._emit(op, lambda x: x, op.inputs[:1])
        elif sizes:
            sizes = list(sizes)
            self._emit(op, lambda x: torch.split(x, sizes, axis), op.inputs[:1])
        else:
            self._emit(op, lambda x: torch.chunk(x, count, axis), op.inputs[:1])

    def visit_squeeze(self, op, network):
        axes, runtime = self._axes(op)
        if runtime:
            self._emit(op, lambda x, a: torch.squeeze(x, tuple(a.tolist())))
        elif axes is None:
            self._emit(op, torch.squeeze, op.inputs[:1])
        else:
            axes = tuple(axes)
            self._emit(op, lambda x: torch.squeeze(x, axes), op.inputs[:1])

    def visit_unsqueeze(self, op, network):
        axes, runtime = self._axes(op)
        if runtime:
            self._emit(op, lambda x, a: _unsqueeze_fn(a.tolist())(x))
            return
        if axes is None:
            raise self.node_error(op, "Unsqueeze needs axes", ShapeError)
        rank = self._rank(op.inputs[0])
        if rank is not None and len(axes) == 1:
            axis = axes[0] % (rank + 1)
            self._emit(op, lambda x: x.unsqueeze(axis), op.inputs[:1])
        else:
            self._emit(op, _unsqueeze_fn(axes), op.inputs[:1])

    def visit_shape(self, op, network):
        start = op.attributes.get("start") or 0
        end = op.attributes.get("end")
        key = slice(start, end)
        shape = self._shape(op.inputs[0])
        if shape is not None:
            value = torch.tensor(list(shape)[key], dtype=torch.int64)
            self._emit(op, lambda: value, [])
            return
        self._emit(op, lambda x: torch.tensor(x.shape[key], dtype=torch.int64,
                                              device=x.device))

    def visit_size(self, op, network):
        shape = self._shape(op.inputs[0])
        if shape is not None:
            value = torch.tensor(math.prod(shape), dtype=torch.int64)
            self._emit(op, lambda: value, [])
            return
        self._emit(op, lambda x: torch.tensor(x.numel(), dtype=torch.int64, device=x.device))

    def visit_slice(self, op, network):
        names = list(op.inputs) + ["", ""]
        starts, ends = self._ints(names[1]), self._ints(names[2])
        axes = self._ints(names[3]) if names[3] else None
        steps = self._ints(names[4]) if names[4] else None
        runtime = (starts is None or ends is None or (names[3] and axes is None)
                   or (names[4] and steps is None))
        if runtime:
            def slice_dynamic(x, s, e, a=None, st=None):
                s, e = s.tolist(), e.tolist()
                a = list(range(len(s))) if a is None else a.tolist()
                st = [1] * len(s) if st is None else st.tolist()
                return _slice(x, s, e, a, st)
            self._emit(op, slice_dynamic)
            return
        axes = list(range(len(starts))) if axes is None else list(axes)
        steps = [1] * len(starts) if steps is None else list(steps)
        rank = self._rank(op.inputs[0])
        if rank is not None:
            axes = [a % rank for a in axes]
        if all(a >= 0 for a in axes) and all(s > 0 for s in steps):
            key = [slice(None)] * (max(axes) + 1 if axes else 0)
            for start, end, axis, step in zip(starts, ends, axes, steps):
                key[axis] = slice(start, end, step)
            key = tuple(key)
            self._emit(op, lambda x: x[key], op.inputs[:1])
            return
        self._emit(op, lambda x: _slice(x, starts, ends, axes, steps), op.inputs[:1])

    def visit_expand(self, op, network):
        shape = self._ints(op.inputs[1])
        if shape is None:
            self._emit(op, lambda x, s: x.expand(torch.broadcast_shapes(
                x.shape, tuple(s.tolist()))))
            return
        x_shape = self._shape(op.inputs[0])
        if x_shape is not None:
            target = torch.broadcast_shapes(x_shape, tuple(shape))
            self._emit(op, lambda x: x.expand(target), op.inputs[:1])
        else:
            shape = tuple(shape)
            self._emit(op, lambda x: x.expand(torch.broadcast_shapes(x.shape, shape)),
                       op.inputs[:1])

    def visit_pad(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Pad.html: pads (negative ones crop) over
        ``axes`` (default all); pads and axes known while building are turned into
        F.pad's form once, others (a function body's computed pads) at every run."""
        a = op.attributes
        mode = _PAD_MODES.get(a.get("mode") or "constant")
        if mode is None:
            raise self.node_error(op, f"pad mode {a.get('mode')!r} is not supported "
                                  f"(constant, reflect, edge, wrap are)")
        x_name, pads_name, value_name, axes_name = (list(op.inputs) + ["", "", ""])[:4]
        pads = self._ints(pads_name)
        axes = self._ints(axes_name) if axes_name else None
        if pads is None or (axes_name and axes is None):
            def pad_dynamic(x, p, v=None, a=None):
                explicit = _explicit_pads(p.tolist(), None if a is None else a.tolist(),
                                          x.dim())
                return _pad(x, explicit, mode, v)
            self._emit(op, pad_dynamic, [x_name, pads_name, value_name, axes_name])
            return
        rank = self._rank(x_name)
        fixed = None if rank is None else _explicit_pads(pads, axes, rank)

        def pads_of(x):
            return fixed if fixed is not None else _explicit_pads(pads, axes, x.dim())
        value = self._scalar(value_name) if value_name else None
        if value_name and value is None:   # a parameter, or computed while running
            self._emit(op, lambda x, v: _pad(x, pads_of(x), mode, v), [x_name, value_name])
        else:
            self._emit(op, lambda x: _pad(x, pads_of(x), mode, value), [x_name])

    def visit_trilu(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Trilu.html"""
        fn = torch.triu if op.attributes.get("upper", 1) else torch.tril
        if len(op.inputs) > 1 and op.inputs[1]:
            k = self._ints(op.inputs[1])
            if k is None:
                self._emit(op, lambda x, k: fn(x, int(k.reshape(-1)[0])))
                return
            diagonal = k[0]
            self._emit(op, lambda x: fn(x, diagonal), op.inputs[:1])
        else:
            self._emit(op, fn, op.inputs[:1])

    def visit_tile(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Tile.html"""
        repeats = self._ints(op.inputs[1])
        if repeats is None:
            self._emit(op, lambda x, r: x.repeat(tuple(int(v) for v in r.tolist())))
        else:
            repeats = tuple(repeats)
            self._emit(op, lambda x: x.repeat(repeats), op.inputs[:1])

    def visit_depthtospace(self, op, network):
        """DCR (depth, column, row) or CRD ordering of the moved channels.
        https://onnx.ai/onnx/operators/onnx__DepthToSpace.html"""
        block = op.attributes["blocksize"]
        crd = (op.attributes.get("mode") or "DCR") == "CRD"

        def depth_to_space(x):
            n, c, h, w = x.shape
            channels = c // (block * block)
            if crd:
                y = x.reshape(n, channels, block, block, h, w).permute(0, 1, 4, 2, 5, 3)
            else:
                y = x.reshape(n, block, block, channels, h, w).permute(0, 3, 4, 1, 5, 2)
            return y.reshape(n, channels, h * block, w * block)
        self._emit(op, depth_to_space)

    def visit_spacetodepth(self, op, network):
        """The inverse of DepthToSpace in the same mode (DCR or CRD).
        https://onnx.ai/onnx/operators/onnx__SpaceToDepth.html"""
        block = op.attributes["blocksize"]
        order = ((0, 1, 3, 5, 2, 4) if (op.attributes.get("mode") or "DCR") == "CRD"
                 else (0, 3, 5, 1, 2, 4))

        def space_to_depth(x):
            n, c, h, w = x.shape
            y = x.reshape(n, c, h // block, block, w // block, block)
            return y.permute(order).reshape(n, c * block * block, h // block,
                                                       w // block)
        self._emit(op, space_to_depth)

    def visit_centercroppad(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__CenterCropPad.html"""
        axes = op.attributes.get("axes")
        shape = self._ints(op.inputs[1])
        if shape is not None:
            self._emit(op, lambda x: center_crop_pad(x, shape, axes), op.inputs[:1])
            return
        self._emit(op, lambda x, s: center_crop_pad(x, s.tolist(), axes))


__all__ = ["SequenceOps"]


__all__ = ["ShapeOps"]
