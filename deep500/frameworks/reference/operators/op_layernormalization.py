"""LayerNormalization (opset 17): standardize X over the axes ``[axis, ..., rank-1]`` in the
``stash_type`` precision, then Y = Normalized·Scale + B; also outputs Mean and InvStdDev (in
the stash type). https://onnx.ai/onnx/operators/onnx__LayerNormalization.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_rows import as_rows, row_sums
from deep500.frameworks.reference.operators._op_common_norm import (check_unidirectional,
                                                                     normalized_axes,
                                                                     onnx_float_dtype,
                                                                     standardize,
                                                                     standardize_backward)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("LayerNormalization")
class LayerNormalization(ReferenceOp):
    defaults = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def _stage_one(self, X, Scale, B):
        axes = normalized_axes(self.op_type, self.attr("axis"), X.ndim)
        check_unidirectional(self.op_type, "Scale", Scale, X.shape)
        if B is not None:
            check_unidirectional(self.op_type, "B", B, X.shape)
        stash = onnx_float_dtype(self.op_type, "stash_type", self.attr("stash_type"))
        x_hat, mean, inv_std = standardize(X.astype(stash), axes, self.attr("epsilon"))
        return axes, x_hat, mean, inv_std

    def forward(self, X, Scale, B=None):
        stash = onnx_float_dtype(self.op_type, "stash_type", self.attr("stash_type"))
        if X.dtype == stash and stash in (np.float32, np.float64) and X.size:
            return self._forward_rows(X, Scale, B)
        _, x_hat, mean, inv_std = self._stage_one(X, Scale, B)
        Y = x_hat.astype(X.dtype) * Scale
        if B is not None:
            Y = Y + B
        return Y.astype(X.dtype, copy=False), mean, inv_std

    def _forward_rows(self, X, Scale, B):
        """The forward pass with the normalized axes flattened into rows: the same two-pass
        statistics as ``standardize``, summed by ``row_sums`` (a BLAS product, not NumPy's
        per-row reduction), in place on one array."""
        axis = normalized_axes(self.op_type, self.attr("axis"), X.ndim)[0]
        check_unidirectional(self.op_type, "Scale", Scale, X.shape)
        if B is not None:
            check_unidirectional(self.op_type, "B", B, X.shape)
        t = X.dtype.type
        rows = as_rows(X.reshape(X.shape[:axis] + (-1,)))
        count = t(rows.shape[1])
        mean = row_sums(rows) / count
        y = np.subtract(rows, mean[:, np.newaxis])
        variance = row_sums(np.square(y)) / count
        inv_std = np.sqrt(np.add(variance, t(self.attr("epsilon")), out=variance), out=variance)
        np.divide(t(1), inv_std, out=inv_std)
        np.multiply(y, inv_std[:, np.newaxis], out=y)
        y = y.reshape(X.shape)
        np.multiply(y, Scale, out=y)
        if B is not None:
            np.add(y, B, out=y)
        stats_shape = X.shape[:axis] + (1,) * (X.ndim - axis)
        return y, mean.reshape(stats_shape), inv_std.reshape(stats_shape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, Scale, B = (list(fwd_inputs) + [None])[:3]
        axes, x_hat, mean, inv_std = self._stage_one(X, Scale, B)
        grads = list(grads) + [None] * (3 - len(grads))
        dY = grads[0] if grads[0] is not None else np.zeros_like(X)
        normalized = x_hat.astype(X.dtype)
        d_scale = unbroadcast(dY * normalized, Scale.shape).astype(Scale.dtype, copy=False)
        d_B = None if B is None else unbroadcast(dY, B.shape).astype(B.dtype, copy=False)
        d_x_hat = (dY * Scale).astype(x_hat.dtype)
        dX = standardize_backward(d_x_hat, x_hat, inv_std, axes, grads[1], grads[2])
        return [dX.astype(X.dtype, copy=False), d_scale, d_B]
