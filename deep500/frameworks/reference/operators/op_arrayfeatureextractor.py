"""ArrayFeatureExtractor (domain ai.onnx.ml): the elements of X at the flat ``Y``
indices along its last axis, [..., len(Y)]; a vector X gives one row, [1, len(Y)] (as
onnxruntime does). https://onnx.ai/onnx/operators/onnx_aionnxml_ArrayFeatureExtractor.html

Backward: the output's gradient is added back at the positions it was taken from.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("ArrayFeatureExtractor", domain="ai.onnx.ml")
class ArrayFeatureExtractor(ReferenceOp):
    def _indices(self, X, Y) -> np.ndarray:
        indices = np.asarray(Y).reshape(-1)
        if indices.dtype.kind not in "iu":
            raise ShapeError(f"{self.op_type}: the indices Y must be integers, got "
                             f"{indices.dtype}")
        if indices.size and not (0 <= indices.min() and indices.max() < X.shape[-1]):
            raise ShapeError(f"{self.op_type}: indices {indices.tolist()} must lie in "
                             f"[0, {X.shape[-1]}) along X's last axis")
        return indices

    def forward(self, X, Y):
        X = np.asarray(X)
        taken = X[..., self._indices(X, Y)]
        return taken.reshape(1, -1) if X.ndim == 1 else taken

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, Y = np.asarray(fwd_inputs[0]), fwd_inputs[1]
        if grads[0] is None or not np.issubdtype(X.dtype, np.floating):
            return [None if grads[0] is not None else np.zeros_like(X), None]
        dX = np.zeros_like(X)
        np.add.at(dX, (..., self._indices(X, Y)), grads[0].reshape(X.shape[:-1] + (-1,)))
        return [dX, None]
