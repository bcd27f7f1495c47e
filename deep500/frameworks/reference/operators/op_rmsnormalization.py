"""RMSNormalization (opset 23): Y = X / sqrt(mean(X²) + epsilon)·scale, the mean over the
axes ``[axis, ..., rank-1]``, computed in the ``stash_type`` precision (Zhang & Sennrich,
https://arxiv.org/abs/1910.07467). https://onnx.ai/onnx/operators/onnx__RMSNormalization.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_norm import (check_unidirectional,
                                                                     normalized_axes,
                                                                     onnx_float_dtype,
                                                                     rms_scale,
                                                                     rms_scale_backward)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("RMSNormalization")
class RMSNormalization(ReferenceOp):
    defaults = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def _stage_one(self, X, scale):
        axes = normalized_axes(self.op_type, self.attr("axis"), X.ndim)
        check_unidirectional(self.op_type, "scale", scale, X.shape)
        stash = onnx_float_dtype(self.op_type, "stash_type", self.attr("stash_type"))
        x_hat, inv_rms = rms_scale(X.astype(stash), axes, self.attr("epsilon"))
        return axes, x_hat, inv_rms

    def forward(self, X, scale):
        _, x_hat, _ = self._stage_one(X, scale)
        # Y has scale's type (V), which may differ from X's (T).
        return (x_hat.astype(X.dtype).astype(scale.dtype) * scale).astype(scale.dtype,
                                                                           copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, scale = fwd_inputs
        axes, x_hat, inv_rms = self._stage_one(X, scale)
        dY = grads[0] if grads[0] is not None else np.zeros(X.shape, scale.dtype)
        normalized = x_hat.astype(X.dtype).astype(scale.dtype)
        d_scale = unbroadcast(dY * normalized, scale.shape).astype(scale.dtype, copy=False)
        dX = rms_scale_backward((dY * scale).astype(x_hat.dtype), x_hat, inv_rms, axes)
        return [dX.astype(X.dtype, copy=False), d_scale]
