"""InstanceNormalization (opset 22): Y = scale[c]·(X - mean)/sqrt(var + epsilon) + B[c],
mean and variance per instance and channel over the spatial axes (Ulyanov et al.,
https://arxiv.org/abs/1607.08022).
https://onnx.ai/onnx/operators/onnx__InstanceNormalization.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_norm import (check_per_channel,
                                                                     per_channel, standardize,
                                                                     standardize_backward,
                                                                     working_dtype)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("InstanceNormalization")
class InstanceNormalization(ReferenceOp):
    defaults = {"epsilon": 1e-5}

    def _stage_one(self, X, scale, B):
        check_per_channel(self.op_type, "scale", scale, X)
        check_per_channel(self.op_type, "B", B, X)
        axes = tuple(range(2, X.ndim))
        x_hat, _, inv_std = standardize(X.astype(working_dtype(X)), axes,
                                        self.attr("epsilon"))
        return axes, x_hat, inv_std

    def forward(self, X, scale, B):
        _, x_hat, _ = self._stage_one(X, scale, B)
        Y = x_hat.astype(X.dtype, copy=False) * per_channel(scale, X.ndim) + per_channel(B, X.ndim)
        return Y.astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, scale, B = fwd_inputs
        axes, x_hat, inv_std = self._stage_one(X, scale, B)
        dY = grads[0] if grads[0] is not None else np.zeros_like(X)
        outer = (0,) + axes
        d_scale = np.sum(dY * x_hat.astype(X.dtype, copy=False), axis=outer).astype(scale.dtype,
                                                                         copy=False)
        d_B = np.sum(dY, axis=outer).astype(B.dtype, copy=False)
        d_x_hat = (dY * per_channel(scale, X.ndim)).astype(x_hat.dtype, copy=False)
        dX = standardize_backward(d_x_hat, x_hat, inv_std, axes)
        return [dX.astype(X.dtype, copy=False), d_scale, d_B]
