"""LayerNormalization (opset 17): standardize X over the axes ``[axis, ..., rank-1]`` in the
``stash_type`` precision, then Y = Normalized·Scale + B; also outputs Mean and InvStdDev (in
the stash type). https://onnx.ai/onnx/operators/onnx__LayerNormalization.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
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
        _, x_hat, mean, inv_std = self._stage_one(X, Scale, B)
        Y = x_hat.astype(X.dtype) * Scale
        if B is not None:
            Y = Y + B
        return Y.astype(X.dtype, copy=False), mean, inv_std

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
