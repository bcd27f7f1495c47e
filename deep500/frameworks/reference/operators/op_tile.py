"""Tile: the input repeated repeats[i] times along each dimension i (``repeats`` an int64
1-D input with one value per dimension). https://onnx.ai/onnx/operators/onnx__Tile.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Tile")
class Tile(ReferenceOp):
    def _repeats(self, input, repeats) -> list:
        repeats = [int(r) for r in np.asarray(repeats).reshape(-1)]
        if len(repeats) != input.ndim or any(r < 0 for r in repeats):
            raise ShapeError(f"{self.op_type}: repeats must hold one non-negative value per "
                             f"dimension of the input (shape {input.shape}), got {repeats}")
        return repeats

    def forward(self, input, repeats):
        input = np.asarray(input)
        return np.tile(input, self._repeats(input, repeats)) if input.ndim else input.copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = np.asarray(fwd_inputs[0])
        if grads[0] is None or not np.issubdtype(input.dtype, np.floating):
            return [np.zeros_like(input), None]
        repeats = self._repeats(input, fwd_inputs[1])
        # Output dimension i is (repeat r_i) x (input d_i): sum over the repeat axes.
        split = [n for r, d in zip(repeats, input.shape) for n in (r, d)]
        dY = np.asarray(grads[0]).reshape(split)
        d_input = dY.sum(axis=tuple(range(0, 2 * input.ndim, 2)))
        return [d_input.astype(input.dtype, copy=False).reshape(input.shape), None]
