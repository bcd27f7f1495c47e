"""MaxPool: Y = the maximum of X over each (strided, dilated) window, padding excluded;
Indices = the flat position in X of each maximum. Any spatial rank.
https://onnx.ai/onnx/operators/onnx__MaxPool.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_im2col import (col2im,
                                                                       im2col_unpadded,
                                                                       pad_spatial)
from deep500.frameworks.reference.operators._op_common_pool import pooling_geometry
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import UnsupportedError


def _lowest(dtype) -> np.generic:
    """A padding value that never wins a maximum."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return dtype.type(-np.inf)
    return np.iinfo(dtype).min


@register("MaxPool")
class MaxPool(ReferenceOp):
    defaults = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None,
                "kernel_shape": None, "pads": None, "storage_order": 0, "strides": None}

    def _argmax(self, X):
        """(geometry, windows as im2col columns (N, C, K, *output), argmax over K)."""
        geometry = pooling_geometry(self, X)
        cols = im2col_unpadded(X, geometry, _lowest(X.dtype))
        # Ties go to the first window position in row-major order, as in PyTorch.
        return geometry, cols, cols.argmax(axis=2)

    def _storage_order(self) -> int:
        storage_order = int(self.attr("storage_order"))
        if storage_order not in (0, 1):
            raise UnsupportedError(f"MaxPool: storage_order={storage_order} must be 0 "
                                   f"(row major) or 1 (column major)")
        return storage_order

    def forward_first_output(self, X):
        """Y alone (for a node that does not ask for Indices): a running maximum over
        the kernel positions, without the windows' columns or their argmax. NaN
        propagates as through the argmax of ``forward``."""
        self._storage_order()
        geometry = pooling_geometry(self, X)
        padded = pad_spatial(X, geometry, _lowest(X.dtype))
        Y = None
        for _, slices in geometry.kernel_slices():
            window = padded[(Ellipsis,) + slices]
            if Y is None:
                Y = window.copy()
            else:
                np.maximum(Y, window, out=Y)
        return Y

    def forward(self, X):
        storage_order = self._storage_order()
        geometry, cols, argmax = self._argmax(X)
        Y = np.take_along_axis(cols, argmax[:, :, None], axis=2)[:, :, 0]
        return Y, self._indices(argmax, geometry, X.shape[:2], storage_order)

    @staticmethod
    def _indices(argmax, geometry, batch_channels, storage_order):
        """Flat indices into X of the window positions ``argmax``.

        Batch and channel are always row major; storage_order=1 makes only the spatial
        part column major (as ONNX Runtime does).
        """
        rank = len(geometry.input)
        kernel_position = np.unravel_index(argmax, geometry.kernel)
        positions = []
        for axis in range(rank):
            shape = [1] * (rank + 2)
            shape[axis + 2] = geometry.output[axis]
            starts = (np.arange(geometry.output[axis]) * geometry.strides[axis]).reshape(shape)
            positions.append(starts + kernel_position[axis] * geometry.dilations[axis]
                             - geometry.pads_begin[axis])
        # Windows lying wholly in padding have no input position; clip keeps them valid.
        spatial = np.ravel_multi_index(positions, geometry.input, mode="clip",
                                       order="F" if storage_order else "C")
        planes = np.arange(int(np.prod(batch_channels))).reshape(batch_channels + (1,) * rank)
        return (planes * int(np.prod(geometry.input)) + spatial).astype(np.int64)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        if grads[0] is None:
            return [np.zeros_like(X)]
        geometry, cols, argmax = self._argmax(X)
        routed = np.zeros_like(cols)
        np.put_along_axis(routed, argmax[:, :, None], grads[0][:, :, None], axis=2)
        return [col2im(routed, geometry)]
