"""LpPool: Y = (Σ |x|^p)^(1/p) over each (strided, dilated) window; padding adds zeros.
Any spatial rank. https://onnx.ai/onnx/operators/onnx__LpPool.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_im2col import interior, pad_spatial
from deep500.frameworks.reference.operators._op_common_pool import pooling_geometry
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("LpPool")
class LpPool(ReferenceOp):
    defaults = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "kernel_shape": None,
                "p": 2, "pads": None, "strides": None}

    def _p(self):
        p = float(self.attr("p"))
        if p <= 0:
            raise ShapeError(f"LpPool: p={self.attr('p')} must be positive")
        return p

    def forward(self, X):
        p = self._p()
        geometry = pooling_geometry(self, X)
        powers = np.abs(pad_spatial(X, geometry)) ** p
        total = np.zeros(X.shape[:2] + geometry.output, X.dtype)
        for _, slices in geometry.kernel_slices():
            total += powers[(Ellipsis,) + slices]
        return total ** (1 / p)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        p = self._p()
        geometry = pooling_geometry(self, X)
        Y = fwd_outputs[0]
        # dY/dx = (|x| / Y)^(p-1) · sign(x); a window of zeros has the subgradient 0.
        share = np.where(Y > 0, grads[0] / np.where(Y > 0, Y, 1) ** (p - 1), 0)
        padded = pad_spatial(X, geometry)
        nonzero = padded != 0   # |0|^(p-1) would be inf for p < 1; its term is 0
        magnitude = np.abs(np.where(nonzero, padded, 1)) ** (p - 1)
        local = np.where(nonzero, magnitude, 0) * np.sign(padded)
        dpadded = np.zeros_like(padded)
        for _, slices in geometry.kernel_slices():
            dpadded[(Ellipsis,) + slices] += share
        return [np.ascontiguousarray((dpadded * local)[interior(geometry)]).astype(X.dtype)]
