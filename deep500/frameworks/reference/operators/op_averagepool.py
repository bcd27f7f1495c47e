"""AveragePool: Y = the mean of X over each (strided, dilated) window, counting padding
only if count_include_pad (never the ceil_mode overhang past it). Any spatial rank.
https://onnx.ai/onnx/operators/onnx__AveragePool.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_im2col import interior, pad_spatial
from deep500.frameworks.reference.operators._op_common_pool import pooling_geometry
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.onnx_interop.window import window_counts


@register("AveragePool")
class AveragePool(ReferenceOp):
    defaults = {"auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0,
                "dilations": None, "kernel_shape": None, "pads": None, "strides": None}

    def _geometry_and_divisor(self, X):
        geometry = pooling_geometry(self, X)
        counts = window_counts(geometry, bool(self.attr("count_include_pad")))
        # A window lying wholly in padding averages nothing; let it be 0 rather than NaN.
        return geometry, np.maximum(counts, 1).astype(X.dtype)

    def forward(self, X):
        geometry, divisor = self._geometry_and_divisor(X)
        padded = pad_spatial(X, geometry)
        total = np.zeros(X.shape[:2] + geometry.output, dtype=X.dtype)
        for _, slices in geometry.kernel_slices():
            total += padded[(Ellipsis,) + slices]
        return total / divisor

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        geometry, divisor = self._geometry_and_divisor(X)
        share = grads[0] / divisor
        padded = np.zeros(X.shape[:2] + geometry.padded, dtype=X.dtype)
        for _, slices in geometry.kernel_slices():
            padded[(Ellipsis,) + slices] += share
        return [np.ascontiguousarray(padded[interior(geometry)])]
