"""Pow (opset 15): Z = X ** Y with multidirectional broadcasting; Z has X's type (Y may
have another numeric type). https://onnx.ai/onnx/operators/onnx__Pow.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.frameworks.reference.operators._op_common_elementwise import broadcast_shape
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


def _is_float(x) -> bool:
    return np.issubdtype(np.asarray(x).dtype, np.floating)


@register("Pow")
class Pow(ReferenceOp):
    def forward(self, X, Y):
        X, Y = np.asarray(X), np.asarray(Y)
        broadcast_shape(self.op_type, X, Y)
        # Negative bases with fractional exponents give NaN, as the operator defines.
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return np.asarray(np.power(X, Y)).astype(X.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, Y = (np.asarray(x) for x in fwd_inputs)
        Z, dZ = fwd_outputs[0], grads[0]
        if dZ is None:
            return [np.zeros_like(X) if _is_float(X) else None,
                    np.zeros_like(Y) if _is_float(Y) else None]
        dX = dY = None
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if _is_float(X):
                # d/dX = Y·X^(Y-1), taken as 0 where Y = 0 (X^0 is constant, even at X = 0).
                slope = np.where(Y == 0, 0, Y * np.power(X, Y - 1))
                dX = unbroadcast(np.asarray(dZ * slope), X.shape).astype(X.dtype, copy=False)
            if _is_float(Y):
                # d/dY = X^Y·ln X, taken as 0 at X = 0 for Y >= 0 (the one-sided limit).
                slope = np.where((X == 0) & (Y >= 0), 0, Z * np.log(X))
                dY = unbroadcast(np.asarray(dZ * slope), Y.shape).astype(Y.dtype, copy=False)
        return [dX, dY]
