"""PyTorchVisitor: shapes and data movement (Flatten, Reshape, Transpose, Concat, Split,
Squeeze, Unsqueeze, Shape, Size, Gather, Slice, Constant, ConstantOfShape, Expand,
Range, Pad). https://onnx.ai/onnx/operators/
"""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.numpy_helper

from deep500.frameworks.pytorch._torch_common import as_tensor, torch_dtype, torch_pads
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


class ShapeOps:
    """``visit_<op>`` of the shape and data-movement operators, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use
    (``_emit``, ``_known``, ``_ints``, ``_shape``, ``_rank``, ``_dtype``, ``_fail``)."""

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
            raise self._fail(op, "Unsqueeze needs axes", ShapeError)
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

    def visit_gather(self, op, network):
        axis = op.attributes["axis"]
        indices = self._known(op.inputs[1])
        if indices is not None and indices.dim() == 0:
            index = int(indices)
            self._emit(op, lambda x: x.select(axis, index), op.inputs[:1])
            return
        rank = self._rank(op.inputs[0])
        to_long = self._dtype(op.inputs[1]) != torch.int64
        if rank is not None or axis >= 0:
            # Advanced indexing with one index tensor is Gather, negatives included.
            lead = (slice(None),) * (axis % rank if axis < 0 else axis)
            if to_long:
                self._emit(op, lambda x, i: x[lead + (i.long(),)])
            else:
                self._emit(op, lambda x, i: x[lead + (i,)])
            return
        self._emit(op, lambda x, i: x[(slice(None),) * (axis % x.dim()) + (i.long(),)])

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

    def visit_constant(self, op, network):
        # The parser made value_float(s)/value_int(s) a ``value`` tensor.
        if op.attributes.get("value") is None:
            raise self._fail(op, "only tensor, float(s) and int(s) constants are "
                                 "supported (not sparse or string ones)")
        value = onnx.numpy_helper.to_array(op.attributes["value"])
        if value.dtype.kind in "OUS":
            raise self._fail(op, "string tensors have no PyTorch type")
        tensor = as_tensor(value)
        self._emit(op, lambda: tensor, [])

    def visit_constantofshape(self, op, network):
        given = op.attributes.get("value")
        value = (onnx.numpy_helper.to_array(given) if given is not None
                 else np.zeros(1, np.float32))
        fill, dtype = value.reshape(-1)[0].item(), torch_dtype(
            onnx.helper.np_dtype_to_tensor_dtype(value.dtype))
        self._emit(op, lambda shape: torch.full(shape.tolist(), fill, dtype=dtype,
                                                device=shape.device))

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

    def visit_range(self, op, network):
        def arange(start, limit, delta):
            return torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype,
                                device=start.device)
        self._emit(op, arange)

    def visit_pad(self, op, network):
        a = op.attributes
        mode = _PAD_MODES.get(a.get("mode") or "constant")
        if mode is None:
            raise self._fail(op, f"pad mode {a.get('mode')!r} is not supported "
                                 f"(constant, reflect, edge, wrap are)")
        names = list(op.inputs) + ["", "", ""]
        value_name = ""
        pads = self._ints(names[1])
        axes = self._ints(names[3]) if names[3] else None
        if pads is None or (names[3] and axes is None):
            raise self._fail(op, "pads and axes must be constants (initializers or "
                                 "Constant nodes)")
        value = self._scalar(names[2]) if names[2] else 0
        if names[2] and value is None:  # a parameter (floating initializer)
            value_name = names[2]

        def pads_for_rank(rank):
            chosen = list(range(rank)) if axes is None else [x % rank for x in axes]
            half = len(pads) // 2
            full = [0] * (2 * rank)
            for i, axis in enumerate(chosen):
                full[axis], full[rank + axis] = pads[i], pads[half + i]
            result = torch_pads(full)
            while result and result[-1] == 0 and result[-2] == 0:
                result = result[:-2]  # modes other than 'constant' pad only the
            return result             # trailing axes: drop the unpadded leading ones

        rank = self._rank(op.inputs[0])
        if rank is not None:
            explicit = pads_for_rank(rank)
            pads_of = lambda x: explicit  # noqa: E731
        else:
            pads_of = lambda x: pads_for_rank(x.dim())  # noqa: E731
        if value_name:
            # pad(x - v) + v is x inside and v outside, and differentiable in v.
            self._emit(op, lambda x, v: F.pad(x - v, pads_of(x)) + v,
                       [op.inputs[0], value_name])
        elif mode == "constant":
            self._emit(op, lambda x: F.pad(x, pads_of(x), "constant", value), op.inputs[:1])
        else:
            self._emit(op, lambda x: F.pad(x, pads_of(x), mode), op.inputs[:1])
