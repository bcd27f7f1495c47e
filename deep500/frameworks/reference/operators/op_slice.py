"""Slice (opset 13): data[starts:ends:steps] along ``axes`` (default: the first
len(starts) axes; steps default 1). Negative starts/ends add the dimension; then starts
are clamped to [0, dim] and ends to [0, dim] for positive steps, to [0, dim - 1] and
[-1, dim - 1] for negative ones. https://onnx.ai/onnx/operators/onnx__Slice.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.axes import distinct_axes


def _ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


@register("Slice")
class Slice(ReferenceOp):
    def _index(self, shape, starts, ends, axes=None, steps=None) -> tuple:
        """The NumPy index (a tuple of slices) that the inputs select."""
        starts, ends = _ints(starts), _ints(ends)
        rank = len(shape)
        axes = list(range(len(starts))) if axes is None else _ints(axes)
        steps = [1] * len(starts) if steps is None else _ints(steps)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise ShapeError(f"{self.op_type}: starts {starts}, ends {ends}, axes {axes} and "
                             f"steps {steps} must have one value per sliced axis")
        axes = distinct_axes(self.op_type, axes, rank, f"data of shape {tuple(shape)}")
        index = [slice(None)] * rank
        for axis, start, end, step in zip(axes, starts, ends, steps):
            if step == 0:
                raise ShapeError(f"{self.op_type}: steps must not be 0 (axis {axis})")
            dim = shape[axis]
            start = start + dim if start < 0 else start
            end = end + dim if end < 0 else end
            if step > 0:
                index[axis] = slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
            else:
                start = min(max(start, 0), dim - 1)
                end = min(max(end, -1), dim - 1)
                # End -1 means "through element 0", which a Python slice spells None.
                index[axis] = slice(start, None if end < 0 else end, step)
        return tuple(index)

    def forward(self, data, starts, ends, axes=None, steps=None):
        data = np.asarray(data)
        # A copy, so that the output never aliases the input.
        return data[self._index(data.shape, starts, ends, axes, steps)].copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data = np.asarray(fwd_inputs[0])
        d_data = np.zeros_like(data)
        if grads[0] is not None:
            d_data[self._index(data.shape, *fwd_inputs[1:])] = grads[0]
        return [d_data] + [None] * (len(fwd_inputs) - 1)
