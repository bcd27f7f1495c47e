"""OneHot: a tensor with a new dimension of size ``depth`` at ``axis``, holding values[1]
(on) where the position equals the index and values[0] (off) elsewhere; indices outside
[-depth, depth - 1] give all-off. https://onnx.ai/onnx/operators/onnx__OneHot.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import normalize_axis
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("OneHot")
class OneHot(ReferenceOp):
    defaults = {"axis": -1}

    def _hot(self, indices, depth) -> np.ndarray:
        """The boolean one-hot mask."""
        indices = np.asarray(indices)
        depth = np.asarray(depth)
        if depth.size != 1:
            raise ShapeError(f"{self.op_type}: depth must be a scalar, got shape {depth.shape}")
        depth = int(depth.reshape(-1)[0])
        if depth < 1:
            raise ShapeError(f"{self.op_type}: depth must be positive, got {depth}")
        axis = normalize_axis(self.op_type, self.attr("axis"), indices.ndim + 1)
        indices = indices.astype(np.int64)   # the spec allows float indices (truncated)
        indices = np.where(indices < 0, indices + depth, indices)
        positions = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
        return np.expand_dims(indices, axis) == positions

    def forward(self, indices, depth, values):
        values = np.asarray(values).reshape(-1)
        if values.size != 2:
            raise ShapeError(f"{self.op_type}: values must be [off_value, on_value], got "
                             f"{values.size} values")
        return np.where(self._hot(indices, depth), values[1], values[0])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        values = np.asarray(fwd_inputs[2])
        if not np.issubdtype(values.dtype, np.floating):
            return [None, None, None]
        if grads[0] is None:
            return [None, None, np.zeros_like(values)]
        hot, dY = self._hot(fwd_inputs[0], fwd_inputs[1]), np.asarray(grads[0])
        d_values = np.array([np.sum(dY, where=~hot), np.sum(dY, where=hot)], values.dtype)
        return [None, None, d_values.reshape(values.shape)]
