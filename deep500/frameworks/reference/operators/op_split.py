"""Split: cut the input along ``axis`` into parts of the sizes in the int64 ``split`` input,
or into ``num_outputs`` parts of ceil(d / num_outputs) with a smaller last part.
https://onnx.ai/onnx/operators/onnx__Split.html

ONNX (opset 18) requires either ``split`` or ``num_outputs``. Before opset 18 an equal split
took its number of parts from the node's outputs, which an operator on arrays cannot see:
callers converting such a node pass that count as ``num_outputs``. If both are given, they
must agree.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Split")
class Split(ReferenceOp):
    defaults = {"axis": 0, "num_outputs": None}

    def _layout(self, shape: tuple, split) -> tuple[int, list[int]]:
        """(axis, sizes of the parts) for an input of ``shape``."""
        rank, axis = len(shape), self.attr("axis")
        if not -rank <= axis < rank:
            raise ShapeError(f"{self.op_type}: axis {axis} is outside [{-rank}, {rank - 1}] "
                             f"for an input of shape {shape}")
        axis %= rank
        extent, count = shape[axis], self.attr("num_outputs")
        if split is not None:
            sizes = [int(s) for s in np.asarray(split, dtype=np.int64).reshape(-1)]
            if not sizes or any(s < 0 for s in sizes) or sum(sizes) != extent:
                raise ShapeError(f"{self.op_type}: split sizes {sizes} must be >= 0 and sum to "
                                 f"{extent}, the extent of axis {axis} of {shape}")
            if count is not None and count != len(sizes):
                raise ShapeError(f"{self.op_type}: num_outputs={count} disagrees with the "
                                 f"{len(sizes)} split sizes {sizes}")
            return axis, sizes
        if count is None:
            raise ShapeError(f"{self.op_type} needs the split input or the num_outputs "
                             f"attribute")
        if count < 1:
            raise ShapeError(f"{self.op_type}: num_outputs must be >= 1, got {count}")
        chunk = -(-extent // count)
        last = extent - chunk * (count - 1)
        if last < 0:
            raise ShapeError(f"{self.op_type}: {extent} elements along axis {axis} cannot form "
                             f"{count} parts of {chunk} and a smaller last one (the ONNX rule)")
        return axis, [chunk] * (count - 1) + [last]

    def forward(self, input, split=None):
        input = np.asarray(input)
        axis, sizes = self._layout(input.shape, split)
        # Copies, so that the outputs never alias the input.
        parts = np.split(input, np.cumsum(sizes)[:-1], axis=axis)
        return tuple(part.copy() for part in parts)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = fwd_inputs[0]
        split = fwd_inputs[1] if len(fwd_inputs) > 1 else None
        axis, _ = self._layout(np.shape(input), split)
        parts = [np.zeros_like(y) if g is None else np.asarray(g, dtype=np.asarray(y).dtype)
                 for g, y in zip(grads, fwd_outputs)]
        result = [np.concatenate(parts, axis=axis)]
        return result + [None] * (len(fwd_inputs) - 1)
