"""Pad: pads (or, with negative pads, crops) each axis of data at its beginning and end,
filling with constant_value or by reflecting, repeating the edge of, or wrapping the data.
https://onnx.ai/onnx/operators/onnx__Pad.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError, UnsupportedError

MODES = ("constant", "reflect", "edge", "wrap")


def _source_index(size: int, begin: int, end: int, mode: str) -> np.ndarray:
    """For each position of a padded axis, the position of the data it copies."""
    positions = np.arange(-begin, size + end)
    if mode == "edge":
        return np.clip(positions, 0, size - 1)
    if mode == "wrap":
        return positions % size
    if size == 1:  # reflect: a single element mirrors onto itself
        return np.zeros_like(positions)
    # Reflection (without repeating the edge) is periodic with period 2·(size − 1).
    period = 2 * (size - 1)
    folded = positions % period
    return np.where(folded < size, folded, period - folded)


@register("Pad")
class Pad(ReferenceOp):
    defaults = {"mode": "constant"}

    def _layout(self, data, pads, axes):
        """(crop, begin, end): the index that removes negative pads from data, and the
        non-negative number of elements to add before and after along every axis."""
        mode = self.attr("mode")
        if mode not in MODES:
            raise UnsupportedError(f"Pad: mode={mode!r} is not one of {MODES}")
        pads = np.asarray(pads)
        if not np.issubdtype(pads.dtype, np.integer) or pads.ndim != 1:
            raise ShapeError(f"Pad: pads must be a 1-D integer tensor, got {pads.dtype} "
                             f"of shape {pads.shape}")
        rank = data.ndim
        if axes is None:
            axes = list(range(rank))
        else:
            axes = [int(a) for a in np.asarray(axes).ravel()]
            if any(not -rank <= a < rank for a in axes):
                raise ShapeError(f"Pad: axes {axes} out of range for data of rank {rank}")
            axes = [a % rank for a in axes]
            if len(set(axes)) != len(axes):
                raise ShapeError(f"Pad: axes {axes} repeat an axis")
        if pads.size != 2 * len(axes):
            raise ShapeError(f"Pad: pads has {pads.size} values; padding {len(axes)} axes "
                             f"needs {2 * len(axes)} (all beginnings, then all ends)")
        begin, end = [0] * rank, [0] * rank
        for i, axis in enumerate(axes):
            begin[axis], end[axis] = int(pads[i]), int(pads[i + len(axes)])
        crop = []
        for axis, size in enumerate(data.shape):
            start, stop = max(0, -begin[axis]), size - max(0, -end[axis])
            if start > stop:
                raise ShapeError(f"Pad: negative pads {begin[axis]}, {end[axis]} remove more "
                                 f"than the {size} elements of axis {axis}")
            crop.append(slice(start, stop))
        cropped_shape = tuple(s.stop - s.start for s in crop)
        for axis, size in enumerate(cropped_shape):
            if mode != "constant" and size == 0 and (begin[axis] > 0 or end[axis] > 0):
                raise ShapeError(f"Pad: mode={mode} cannot pad the empty axis {axis}")
        return (tuple(crop), [max(0, b) for b in begin], [max(0, e) for e in end],
                cropped_shape)

    def forward(self, data, pads, constant_value=None, axes=None):
        crop, begin, end, shape = self._layout(data, pads, axes)
        mode = self.attr("mode")
        x = data[crop]
        if mode == "constant":
            value = 0 if constant_value is None else np.asarray(constant_value).reshape(-1)[0]
            out = np.full([b + n + e for b, n, e in zip(begin, shape, end)], value,
                          dtype=data.dtype)
            out[tuple(slice(b, b + n) for b, n in zip(begin, shape))] = x
            return out
        for axis, size in enumerate(shape):
            if begin[axis] or end[axis]:
                x = np.take(x, _source_index(size, begin[axis], end[axis], mode), axis=axis)
        return x.copy() if np.may_share_memory(x, data) else x

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, pads = fwd_inputs[0], fwd_inputs[1]
        constant_value = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        axes = fwd_inputs[3] if len(fwd_inputs) > 3 else None
        crop, begin, end, shape = self._layout(data, pads, axes)
        mode = self.attr("mode")
        dY = grads[0]
        inner = tuple(slice(b, b + n) for b, n in zip(begin, shape))
        d_constant = None
        if mode == "constant":
            grad = dY[inner]
            if constant_value is not None:
                # Every padded element is a copy of constant_value.
                border_sum = dY.sum() - grad.sum()
                d_constant = np.full(np.shape(constant_value), border_sum,
                                     dtype=np.asarray(constant_value).dtype)
        else:
            grad = dY
            if constant_value is not None:
                d_constant = np.zeros_like(np.asarray(constant_value))
            # Undo forward's per-axis gathers in reverse: each padded element's gradient
            # goes back to the element it copied.
            for axis in reversed(range(data.ndim)):
                if not (begin[axis] or end[axis]):
                    continue
                size = shape[axis]
                source = _source_index(size, begin[axis], end[axis], mode)
                lead = (slice(None),) * axis
                summed = grad[lead + (slice(begin[axis], begin[axis] + size),)].copy()
                borders = np.r_[0:begin[axis], begin[axis] + size:len(source)]
                for position in borders:
                    summed[lead + (source[position],)] += grad[lead + (position,)]
                grad = summed
        if grad.shape == data.shape:
            d_data = grad.copy() if np.may_share_memory(grad, dY) else grad
        else:
            d_data = np.zeros_like(data)
            d_data[crop] = grad
        result = [d_data, None, d_constant, None]
        return result[:len(fwd_inputs)]
