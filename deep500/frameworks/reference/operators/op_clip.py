"""Clip (opset 11+): Y = min(max(input, min), max) with the optional scalar inputs ``min``
and ``max`` (each bound left out means no bound on that side).
https://onnx.ai/onnx/operators/onnx__Clip.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Clip")
class Clip(ReferenceOp):
    def _check(self, input, *bounds):
        for name, bound in zip(("min", "max"), bounds):
            if bound is not None and np.size(bound) != 1:
                raise ShapeError(f"{self.op_type}: {name} must be a scalar, got shape "
                                 f"{np.shape(bound)}")

    def forward(self, input, min=None, max=None):
        self._check(input, min, max)
        Y = np.array(input, copy=True)
        if min is not None:
            np.maximum(Y, np.asarray(min).reshape(()), out=Y, casting="unsafe")
        if max is not None:
            np.minimum(Y, np.asarray(max).reshape(()), out=Y, casting="unsafe")
        return Y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = np.asarray(fwd_inputs[0])
        low = fwd_inputs[1] if len(fwd_inputs) > 1 else None
        high = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        dY = np.zeros_like(input) if grads[0] is None else np.asarray(grads[0])
        zero = input.dtype.type(0)
        d_low = d_high = None
        # Backward through max(input, min) and then min(·, max); a tie passes the gradient
        # to the input (as PyTorch's clamp does).
        raised = input if low is None else np.maximum(input, np.asarray(low).reshape(()))
        if high is not None:
            above = raised > np.asarray(high).reshape(())
            d_high = np.asarray(np.where(above, dY, zero).sum(), dtype=np.asarray(high).dtype)
            d_high = d_high.reshape(np.shape(high))
            dY = np.where(above, zero, dY)
        if low is not None:
            below = input < np.asarray(low).reshape(())
            d_low = np.asarray(np.where(below, dY, zero).sum(), dtype=np.asarray(low).dtype)
            d_low = d_low.reshape(np.shape(low))
            dY = np.where(below, zero, dY)
        d_input = np.array(dY, dtype=input.dtype, copy=True)
        return [d_input, d_low, d_high][:len(fwd_inputs)]
