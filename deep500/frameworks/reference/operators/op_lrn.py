"""LRN (opset 13), local response normalization across channels (Krizhevsky et al., 2012):
Y = X / (bias + alpha/size · square_sum)^beta, square_sum[n, c] = Σ X[n, i]² over
i ∈ [c - ⌊(size-1)/2⌋, c + ⌈(size-1)/2⌉]. https://onnx.ai/onnx/operators/onnx__LRN.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError


def _window_sum(a: np.ndarray, before: int, after: int) -> np.ndarray:
    """out[:, c] = Σ a[:, i] over i ∈ [c - before, c + after] ∩ [0, C), by a running sum."""
    channels = a.shape[1]
    pad = [(0, 0)] * a.ndim
    pad[1] = (1, 0)
    running = np.cumsum(np.pad(a, pad), axis=1)  # running[:, k] = Σ a[:, :k]
    hi = np.minimum(np.arange(channels) + after + 1, channels)
    lo = np.maximum(np.arange(channels) - before, 0)
    return np.take(running, hi, axis=1) - np.take(running, lo, axis=1)


@register("LRN")
class LRN(ReferenceOp):
    defaults = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": None}

    def _window(self, X):
        size = self.attr("size")
        if size is None or size < 1:
            raise Deep500Error(f"{self.op_type}: the attribute size (number of channels to sum "
                               f"over) is required and must be positive, got {size}")
        if X.ndim < 3:
            raise ShapeError(f"{self.op_type}: X must have shape (N, C, D1, ...), got {X.shape}")
        return (size - 1) // 2, size // 2  # channels before, after: ⌊(size-1)/2⌋, ⌈(size-1)/2⌉

    def _base(self, X):
        before, after = self._window(X)
        t = X.dtype.type
        square_sum = _window_sum(X * X, before, after)
        return t(self.attr("bias")) + t(self.attr("alpha") / self.attr("size")) * square_sum

    def forward(self, X):
        base = self._base(X)
        return (X * base ** X.dtype.type(-self.attr("beta"))).astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        if grads[0] is None:
            return [np.zeros_like(X)]
        before, after = self._window(X)
        t, beta = X.dtype.type, self.attr("beta")
        base = self._base(X)
        dY = grads[0]
        # Channel c's base sums channels [c - before, c + after], so channel k feeds the
        # bases of channels [k - after, k + before]: the transposed window.
        through_base = _window_sum(dY * X * base ** t(-beta - 1), after, before)
        dX = dY * base ** t(-beta) - t(2 * beta * self.attr("alpha") / self.attr("size")) * X \
            * through_base
        return [dX.astype(X.dtype, copy=False)]
