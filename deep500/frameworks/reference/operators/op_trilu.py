"""Trilu: the upper (upper=1) or lower triangular part of the last two dimensions,
relative to diagonal ``k`` (an optional int64 scalar input, default 0); other entries 0.
https://onnx.ai/onnx/operators/onnx__Trilu.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Trilu")
class Trilu(ReferenceOp):
    defaults = {"upper": 1}

    def _mask(self, shape, k) -> np.ndarray:
        """True where the output keeps the input (a matrix of the last two dimensions)."""
        if len(shape) < 2:
            raise ShapeError(f"{self.op_type}: the input must have rank >= 2, got shape "
                             f"{tuple(shape)}")
        k = 0 if k is None else np.asarray(k).reshape(-1)
        if not isinstance(k, int):
            if k.size != 1 or not np.issubdtype(k.dtype, np.integer):
                raise ShapeError(f"{self.op_type}: k must be one int64 value, got {k}")
            k = int(k[0])
        rows, cols = np.arange(shape[-2])[:, None], np.arange(shape[-1])[None, :]
        return cols - rows >= k if self.attr("upper") else cols - rows <= k

    def forward(self, input, k=None):
        input = np.asarray(input)
        return np.where(self._mask(input.shape, k), input, np.zeros((), input.dtype))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = np.asarray(fwd_inputs[0])
        d_input = np.zeros_like(input)
        if grads[0] is not None and np.issubdtype(input.dtype, np.floating):
            k = fwd_inputs[1] if len(fwd_inputs) > 1 else None
            d_input = np.where(self._mask(input.shape, k), grads[0], d_input)
        return [d_input] + [None] * (len(fwd_inputs) - 1)
