"""BatchNormalization (opset 15): Y = (X - mean) / sqrt(var + epsilon)·scale + B per channel
(axis 1), with the given statistics (inference) or the batch's population statistics plus
running-statistic outputs (training_mode=1).
https://onnx.ai/onnx/operators/onnx__BatchNormalization.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError

_PARAMETERS = ("scale", "B", "input_mean", "input_var")


@register("BatchNormalization")
class BatchNormalization(ReferenceOp):
    defaults = {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0}

    def _check(self, X, params):
        if X.ndim < 2:
            raise ShapeError(f"{self.op_type}: X must have shape (N, C, ...) with channels on "
                             f"axis 1, got {X.shape}")
        channels = X.shape[1]
        for name, p in zip(_PARAMETERS, params):
            if p is not None and p.shape != (channels,):
                raise ShapeError(f"{self.op_type}: {name} must have shape ({channels},) for "
                                 f"X of shape {X.shape}, got {p.shape}")

    @staticmethod
    def _layout(X):
        """(axes reduced over, shape that broadcasts a per-channel vector against X)."""
        axes = (0,) + tuple(range(2, X.ndim))
        return axes, (1, X.shape[1]) + (1,) * (X.ndim - 2)

    def _statistics(self, X, mean, var):
        """(mean, var, 1/sqrt(var + epsilon)) used to normalise, per channel, in X's dtype."""
        axes, _ = self._layout(X)
        if self.attr("training_mode"):
            mean = X.mean(axis=axes)
            # Two passes, (X - mean)² rather than E[X²] - mean², to avoid cancellation.
            var = np.square(X - mean.reshape(self._layout(X)[1])).mean(axis=axes)
        else:
            mean, var = mean.astype(X.dtype, copy=False), var.astype(X.dtype, copy=False)
        inv_std = X.dtype.type(1) / np.sqrt(var + X.dtype.type(self.attr("epsilon")))
        return mean, var, inv_std

    def forward(self, X, scale, B, input_mean, input_var):
        self._check(X, (scale, B, input_mean, input_var))
        _, shape = self._layout(X)
        mean, var, inv_std = self._statistics(X, input_mean, input_var)
        factor = (scale.astype(X.dtype, copy=False) * inv_std).reshape(shape)
        # (X - mean)·factor + B, with one allocation: the products and sum in place.
        Y = X - mean.reshape(shape)
        Y *= factor
        Y += B.astype(X.dtype, copy=False).reshape(shape)
        if not self.attr("training_mode"):
            return Y
        momentum = X.dtype.type(self.attr("momentum"))
        keep = X.dtype.type(1) - momentum
        running_mean = input_mean.astype(X.dtype, copy=False) * momentum + mean * keep
        running_var = input_var.astype(X.dtype, copy=False) * momentum + var * keep
        return (Y, running_mean.astype(input_mean.dtype, copy=False),
                running_var.astype(input_var.dtype, copy=False))

    def forward_inplace(self, X, scale, B, input_mean, input_var):
        """``forward`` writing Y into X, which the caller no longer needs (inference
        only; see ``ReferenceGraphExecutor``), with the same operations in the same
        order."""
        if self.attr("training_mode") or X.dtype not in (np.float32, np.float64):
            return self.forward(X, scale, B, input_mean, input_var)
        self._check(X, (scale, B, input_mean, input_var))
        _, shape = self._layout(X)
        mean, _, inv_std = self._statistics(X, input_mean, input_var)
        factor = (scale.astype(X.dtype, copy=False) * inv_std).reshape(shape)
        if np.broadcast_shapes(factor.shape, X.shape) != X.shape:
            return self.forward(X, scale, B, input_mean, input_var)
        X -= mean.reshape(shape)
        X *= factor
        X += B.astype(X.dtype, copy=False).reshape(shape)
        return X

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, scale, B, input_mean, input_var = fwd_inputs
        axes, shape = self._layout(X)
        mean, var, inv_std = self._statistics(X, input_mean, input_var)
        centered = X - mean.reshape(shape)
        x_hat = centered * inv_std.reshape(shape)
        dY = grads[0] if grads[0] is not None else np.zeros_like(X)
        d_scale = np.sum(dY * x_hat, axis=axes)
        d_B = np.sum(dY, axis=axes)
        s = scale.astype(X.dtype, copy=False)
        d_x_hat = dY * s.reshape(shape)
        if self.attr("training_mode"):
            count = X.dtype.type(X.size // X.shape[1])
            # Backward through the batch mean and variance (both depend on every X).
            dX = (d_x_hat - (d_B * s).reshape(shape) / count
                  - x_hat * (d_scale * s).reshape(shape) / count) * inv_std.reshape(shape)
            momentum = X.dtype.type(self.attr("momentum"))
            keep = X.dtype.type(1) - momentum
            d_mean_in = np.zeros_like(input_mean)
            d_var_in = np.zeros_like(input_var)
            g_mean = grads[1] if len(grads) > 1 else None
            g_var = grads[2] if len(grads) > 2 else None
            if g_mean is not None:
                dX = dX + (g_mean * keep / count).astype(X.dtype).reshape(shape)
                d_mean_in = (g_mean * momentum).astype(input_mean.dtype)
            if g_var is not None:
                # d(population var)/dX = 2(X - mean)/count; the mean's share sums to zero.
                dX = dX + centered * (2 * g_var * keep / count).astype(X.dtype).reshape(shape)
                d_var_in = (g_var * momentum).astype(input_var.dtype)
        else:
            dX = d_x_hat * inv_std.reshape(shape)
            d_mean_in = (-np.sum(d_x_hat, axis=axes) * inv_std).astype(input_mean.dtype)
            d_var_in = (np.sum(d_x_hat * centered, axis=axes) * X.dtype.type(-0.5)
                        * inv_std ** 3).astype(input_var.dtype)
        return [dX.astype(X.dtype, copy=False), d_scale.astype(scale.dtype, copy=False),
                d_B.astype(B.dtype, copy=False), d_mean_in, d_var_in]
