"""TensorScatter: ``past_cache`` with ``update`` written along ``axis`` (not the batch
axis 0) from position ``write_indices[b]`` for batch element b (0 where not given);
``mode="circular"`` wraps positions modulo the cache's length along the axis, "linear"
requires them to fit. https://onnx.ai/onnx/operators/onnx__TensorScatter.html

Backward: the cache's gradient is the output's where nothing was written, the update's
is the output's gradient at the positions written.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError


@register("TensorScatter")
class TensorScatter(ReferenceOp):
    defaults = {"axis": -2, "mode": "linear"}

    def _positions(self, past_cache, update, write_indices):
        """The axis and, per batch element, the cache positions the update's slices go
        to (a [batch, sequence_length] integer array)."""
        axis, mode = self.attr("axis"), self.attr("mode")
        if mode not in ("linear", "circular"):
            raise Deep500Error(f"{self.op_type}: mode={mode!r} is not 'linear' or 'circular'")
        rank = past_cache.ndim
        if not -rank < axis < rank or axis % rank == 0:
            raise ShapeError(f"{self.op_type}: axis={axis} must name a dimension after the "
                             f"batch dimension of a rank-{rank} cache")
        axis %= rank
        expected = past_cache.shape[:axis] + past_cache.shape[axis + 1:]
        if update.ndim != rank or update.shape[:axis] + update.shape[axis + 1:] != expected:
            raise ShapeError(f"{self.op_type}: update of shape {list(update.shape)} must "
                             f"match the cache {list(past_cache.shape)} except along axis "
                             f"{axis}")
        batch, capacity = past_cache.shape[0], past_cache.shape[axis]
        length = update.shape[axis]
        starts = (np.zeros(batch, np.int64) if write_indices is None
                  else np.asarray(write_indices, np.int64).reshape(batch))
        positions = starts[:, None] + np.arange(length)
        if mode == "circular":
            positions %= capacity
        elif length and (positions.min() < 0 or positions.max() >= capacity):
            raise ShapeError(f"{self.op_type}: writing {length} positions from "
                             f"{starts.tolist()} overruns the cache's {capacity} positions "
                             f"along axis {axis} (mode 'linear')")
        return axis, positions

    def forward(self, past_cache, update, write_indices=None):
        axis, positions = self._positions(past_cache, update, write_indices)
        present = past_cache.copy()
        # Views with the sequence axis second: batch element b's slices are [b, positions].
        cache, slices = np.moveaxis(present, axis, 1), np.moveaxis(update, axis, 1)
        for b in range(present.shape[0]):
            cache[b, positions[b]] = slices[b]
        return present

    def backward(self, grads, fwd_inputs, fwd_outputs):
        past_cache, update = fwd_inputs[:2]
        rest = [None] * (len(fwd_inputs) - 2)
        if grads[0] is None:
            return [np.zeros_like(past_cache), np.zeros_like(update)] + rest
        axis, positions = self._positions(past_cache, update, *fwd_inputs[2:3])
        d_cache, d_update = np.array(grads[0], copy=True), np.empty_like(update)
        cache, slices = np.moveaxis(d_cache, axis, 1), np.moveaxis(d_update, axis, 1)
        for b in range(d_cache.shape[0]):
            slices[b] = cache[b, positions[b]]
            cache[b, positions[b]] = 0
        return [d_cache, d_update] + rest
