"""Gather: the entries of data at ``indices`` along ``axis``; output shape
data.shape[:axis] + indices.shape + data.shape[axis + 1:]. Negative indices count from the
end. https://onnx.ai/onnx/operators/onnx__Gather.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Gather")
class Gather(ReferenceOp):
    defaults = {"axis": 0}

    def _axis_and_indices(self, data, indices):
        """(non-negative axis, indices with negative ones wrapped)."""
        rank, axis = np.ndim(data), self.attr("axis")
        if not -rank <= axis < rank:
            raise ShapeError(f"{self.op_type}: axis {axis} is outside [{-rank}, {rank - 1}] "
                             f"for data of shape {np.shape(data)}")
        axis %= rank
        indices = np.asarray(indices)
        if not np.issubdtype(indices.dtype, np.integer):
            raise ShapeError(f"{self.op_type}: indices must be int32 or int64, got "
                             f"{indices.dtype}")
        extent = np.shape(data)[axis]
        if indices.size and (indices.min() < -extent or indices.max() >= extent):
            raise ShapeError(f"{self.op_type}: indices must lie in [{-extent}, {extent - 1}] "
                             f"for axis {axis} of data of shape {np.shape(data)}; got values "
                             f"from {indices.min()} to {indices.max()}")
        return axis, np.where(indices < 0, indices + extent, indices)

    def forward(self, data, indices):
        axis, indices = self._axis_and_indices(data, indices)
        return np.take(data, indices, axis=axis)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, indices = fwd_inputs
        axis, indices = self._axis_and_indices(data, indices)
        d_data = np.zeros_like(data)
        if grads[0] is not None:
            # Scatter-add: an index gathered twice receives both gradients.
            np.add.at(d_data, (slice(None),) * axis + (indices,), grads[0])
        return [d_data, None]
