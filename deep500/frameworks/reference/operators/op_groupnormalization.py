"""GroupNormalization (opset 21): standardize each group of ``C/num_groups`` channels of
every instance (in the ``stash_type`` precision), then Y = Normalized·scale[c] + bias[c]
(Wu & He, https://arxiv.org/abs/1803.08494). Opset 18's per-group scale and bias (shape
``(num_groups,)``) are accepted too: their shape tells them apart, and where
num_groups = C the two definitions agree.
https://onnx.ai/onnx/operators/onnx__GroupNormalization.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_norm import (onnx_float_dtype,
                                                                     per_channel, standardize,
                                                                     standardize_backward)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError


@register("GroupNormalization")
class GroupNormalization(ReferenceOp):
    defaults = {"num_groups": None, "epsilon": 1e-5, "stash_type": 1}

    def _groups(self, X, scale, bias) -> int:
        groups = self.attr("num_groups")
        if groups is None:
            raise Deep500Error(f"{self.op_type}: the attribute num_groups is required")
        if X.ndim < 2:
            raise ShapeError(f"{self.op_type}: X must have shape (N, C, ...), got {X.shape}")
        channels = X.shape[1]
        if groups <= 0 or channels % groups:
            raise ShapeError(f"{self.op_type}: num_groups={groups} must be a positive divisor "
                             f"of the {channels} channels of X (shape {X.shape})")
        for name, v in (("scale", scale), ("bias", bias)):
            if np.shape(v) not in ((channels,), (groups,)):
                raise ShapeError(f"{self.op_type}: {name} must have shape ({channels},) (one "
                                 f"value per channel; opset 18: ({groups},), one per group), "
                                 f"got {np.shape(v)}")
        return groups

    def _stage_one(self, X, groups):
        stash = onnx_float_dtype(self.op_type, "stash_type", self.attr("stash_type"))
        grouped = X.astype(stash).reshape(X.shape[0], groups, -1)
        x_hat, _, inv_std = standardize(grouped, (2,), self.attr("epsilon"))
        return x_hat, inv_std

    @staticmethod
    def _per_channel(v, channels):
        """A per-group vector (opset 18) repeated for each channel of its group."""
        return np.repeat(v, channels // v.shape[0])

    def forward(self, X, scale, bias):
        groups = self._groups(X, scale, bias)
        x_hat, _ = self._stage_one(X, groups)
        channels = X.shape[1]
        normalized = x_hat.astype(X.dtype).reshape(X.shape)
        Y = (normalized * per_channel(self._per_channel(scale, channels), X.ndim)
             + per_channel(self._per_channel(bias, channels), X.ndim))
        return Y.astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, scale, bias = fwd_inputs
        groups = self._groups(X, scale, bias)
        x_hat, inv_std = self._stage_one(X, groups)
        dY = grads[0] if grads[0] is not None else np.zeros_like(X)
        channels, axes = X.shape[1], (0,) + tuple(range(2, X.ndim))
        normalized = x_hat.astype(X.dtype).reshape(X.shape)
        d_scale = np.sum(dY * normalized, axis=axes)
        d_bias = np.sum(dY, axis=axes)
        if scale.shape[0] != channels:  # opset 18: per group
            d_scale = d_scale.reshape(groups, -1).sum(axis=1)
        if bias.shape[0] != channels:
            d_bias = d_bias.reshape(groups, -1).sum(axis=1)
        d_norm = dY * per_channel(self._per_channel(scale, channels), X.ndim)
        d_x_hat = d_norm.astype(x_hat.dtype).reshape(x_hat.shape)
        dX = standardize_backward(d_x_hat, x_hat, inv_std, (2,)).reshape(X.shape)
        return [dX.astype(X.dtype, copy=False), d_scale.astype(scale.dtype, copy=False),
                d_bias.astype(bias.dtype, copy=False)]
