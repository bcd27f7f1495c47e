"""Conv: Y[n, m] = B[m] + Σ over the C/group input channels of m's group and the kernel
window of W[m, c, k]·X[n, c, window], for 1-, 2- and 3-D (any spatial rank) inputs.
https://onnx.ai/onnx/operators/onnx__Conv.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_im2col import (check_images,
                                                                       im2col_unpadded,
                                                                       interior, pad_spatial)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.window import window_geometry


@register("Conv")
class Conv(ReferenceOp):
    defaults = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                "pads": None, "strides": None}

    def _geometry(self, X, W, B):
        check_images(self.op_type, X, W, "(M, C/group, *kernel)")
        group = int(self.attr("group"))
        channels, filters = X.shape[1], W.shape[0]
        if group < 1 or channels % group or filters % group:
            raise ShapeError(f"Conv: group={group} must divide both the input channels "
                             f"({channels}) and the filters ({filters})")
        if W.shape[1] != channels // group:
            raise ShapeError(f"Conv: X has {channels} channels, so with group={group} W "
                             f"needs {channels // group} channels per filter; W has shape "
                             f"{W.shape}")
        kernel = self.attr("kernel_shape")
        if kernel is not None and tuple(kernel) != W.shape[2:]:
            raise ShapeError(f"Conv: kernel_shape={list(kernel)} does not match W's "
                             f"spatial shape {W.shape[2:]}")
        if B is not None and np.shape(B) != (filters,):
            raise ShapeError(f"Conv: bias B must have shape ({filters},), got {np.shape(B)}")
        for name, tensor in (("W", W), ("B", B)):
            if tensor is not None and tensor.dtype != X.dtype:
                raise ShapeError(f"Conv: {name} has dtype {tensor.dtype}, X has {X.dtype}; "
                                 f"they must match")
        geometry = window_geometry("Conv", X.shape[2:], W.shape[2:],
                                   strides=self.attr("strides"),
                                   dilations=self.attr("dilations"),
                                   pads=self.attr("pads"), auto_pad=self.attr("auto_pad"))
        return geometry, group

    @staticmethod
    def _columns(X, geometry, group):
        """im2col of X as (group, C/group·K, N·L): one matrix per group whose columns are
        the windows of every sample (L output positions each), so each group's
        convolution is a single large matrix product — far better for BLAS than one
        small product per sample."""
        # Channel-major (C, N, ...) input: windows land directly in GEMM order.
        padded = pad_spatial(np.ascontiguousarray(X.swapaxes(0, 1)), geometry)
        cols = np.empty((X.shape[1], geometry.kernel_size, X.shape[0]) + geometry.output,
                        dtype=X.dtype)
        for k, slices in geometry.kernel_slices():
            cols[:, k] = padded[(Ellipsis,) + slices]
        return cols.reshape(group, -1, X.shape[0] * int(np.prod(geometry.output)))

    @staticmethod
    def _columns_adjoint(dcols, X, geometry):
        """col2im for ``_columns``: sums windows back into the unpadded (N, C, ...) input."""
        dcols = dcols.reshape((X.shape[1], geometry.kernel_size, X.shape[0]) +
                              geometry.output)
        padded = np.zeros((X.shape[1], X.shape[0]) + geometry.padded, dtype=X.dtype)
        for k, slices in geometry.kernel_slices():
            padded[(Ellipsis,) + slices] += dcols[:, k]
        return np.ascontiguousarray(padded[interior(geometry)].swapaxes(0, 1))

    # Bytes of im2col columns built at a time: a chunk of samples whose columns stay in
    # the processor's cache between im2col and the product that reads them.
    COLUMN_BYTES = 5 << 19   # 2.5 MiB

    def _forward_by_samples(self, X, W, geometry, output_shape):
        """Y of a group=1 convolution, one (M, C·K) by (C·K, L) product per sample,
        written into an array Y owns (not a reshaped view), which the next node may then
        overwrite in place (ReferenceGraphExecutor's in-place inference). A 1x1 kernel
        with unit strides and no padding reads X itself; otherwise the windows' columns
        are built for a chunk of samples at a time (``COLUMN_BYTES``)."""
        samples, filters = X.shape[0], W.shape[0]
        positions = int(np.prod(geometry.output))
        weights = W.reshape(filters, -1)
        Y = np.empty(output_shape, dtype=np.result_type(W, X))
        out = Y.reshape(samples, filters, positions)
        if (geometry.kernel_size == 1 and geometry.output == geometry.input
                and not any(geometry.pads_begin)):
            np.matmul(weights, np.ascontiguousarray(X).reshape(samples, -1, positions),
                      out=out)
            return Y
        per_sample = weights.shape[1] * positions * X.itemsize
        chunk = max(1, self.COLUMN_BYTES // max(1, per_sample))
        for start in range(0, samples, chunk):
            part = X[start:start + chunk]
            cols = im2col_unpadded(part, geometry).reshape(part.shape[0], -1, positions)
            np.matmul(weights, cols, out=out[start:start + chunk])
        return Y

    def forward(self, X, W, B=None):
        geometry, group = self._geometry(X, W, B)
        output_shape = (X.shape[0], W.shape[0]) + geometry.output
        if group == 1:
            # Per-sample products give Y in its (N, M, *output) layout, with no
            # transposition of X or Y, and are as fast for BLAS as one product over all
            # samples, or faster (OpenBLAS, one thread: 32 products of 16x144 by
            # 144x1024, ResNet-20's first stage at batch 32, take 3.5 ms; one of 16x144
            # by 144x32768 5.3 ms).
            Y = self._forward_by_samples(X, W, geometry, output_shape)
        else:
            # Grouped (depthwise) convolutions: one product per group over all samples,
            # since per-sample products of a group would be too small for BLAS.
            cols = self._columns(X, geometry, group)
            weights = W.reshape(group, W.shape[0] // group, -1)
            Y = np.matmul(weights, cols).reshape((W.shape[0], X.shape[0]) +
                                                 geometry.output)
            Y = np.ascontiguousarray(Y.swapaxes(0, 1))
        if B is not None:
            Y += B.reshape((-1,) + (1,) * len(geometry.output))
        return Y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, W = fwd_inputs[0], fwd_inputs[1]
        B = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        geometry, group = self._geometry(X, W, B)
        dY = np.ascontiguousarray(grads[0].swapaxes(0, 1)).reshape(group, W.shape[0] // group,
                                                                   -1)
        cols = self._columns(X, geometry, group)
        weights = W.reshape(group, W.shape[0] // group, -1)
        dW = np.matmul(dY, cols.swapaxes(-1, -2)).reshape(W.shape)
        dX = self._columns_adjoint(np.matmul(weights.swapaxes(-1, -2), dY), X, geometry)
        result = [dX, dW]
        if len(fwd_inputs) > 2:
            spatial_axes = tuple(range(2, X.ndim))
            result.append(None if B is None else grads[0].sum(axis=(0,) + spatial_axes))
        return result
