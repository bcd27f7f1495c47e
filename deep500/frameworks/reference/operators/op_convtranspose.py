"""ConvTranspose: the adjoint of Conv with respect to its input, for 1-, 2- and 3-D (any
spatial rank) inputs, with groups, strides, dilations, pads, output_padding, output_shape
and auto_pad (the geometry: ``utils/onnx_interop/window.py``). Each input element x[n, c, i] adds x·W[c, m, k] to the full output at
i·stride + k·dilation; the full output has (in - 1)·stride + (kernel - 1)·dilation + 1 +
output_padding elements per axis and loses pads[begin] and pads[end] at its ends.
https://onnx.ai/onnx/operators/onnx__ConvTranspose.html"""
import itertools

import numpy as np

from deep500.frameworks.reference.operators._op_common_im2col import check_images
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.window import conv_transpose_geometry

def _overlap(pads_begin, full, output):
    """(index into the full output, index into the output) of the elements they share;
    a negative pad extends the output with zeros."""
    full_index, out_index = [Ellipsis], [Ellipsis]
    for b, f, o in zip(pads_begin, full, output):
        start, stop = max(0, -b), min(o, f - b)
        out_index.append(slice(start, max(start, stop)))
        full_index.append(slice(start + b, max(start, stop) + b))
    return tuple(full_index), tuple(out_index)


@register("ConvTranspose")
class ConvTranspose(ReferenceOp):
    defaults = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                "output_padding": None, "output_shape": None, "pads": None, "strides": None}

    def _geometry(self, X, W, B):
        check_images(self.op_type, X, W, "(C, M/group, *kernel)")
        group = int(self.attr("group"))
        channels = X.shape[1]
        if group < 1 or channels % group:
            raise ShapeError(f"ConvTranspose: group={group} must divide the input channels "
                             f"({channels})")
        if W.shape[0] != channels:
            raise ShapeError(f"ConvTranspose: W's first axis ({W.shape[0]}) must equal X's "
                             f"channels ({channels}); W has shape {W.shape}")
        filters = W.shape[1] * group
        for name, tensor in (("W", W), ("B", B)):
            if tensor is not None and tensor.dtype != X.dtype:
                raise ShapeError(f"ConvTranspose: {name} has dtype {tensor.dtype}, X has "
                                 f"{X.dtype}; they must match")
        if B is not None and np.shape(B) != (filters,):
            raise ShapeError(f"ConvTranspose: bias B must have shape ({filters},), got "
                             f"{np.shape(B)}")
        kernel = W.shape[2:]
        if self.attr("kernel_shape") is not None and tuple(self.attr("kernel_shape")) != kernel:
            raise ShapeError(f"ConvTranspose: kernel_shape={list(self.attr('kernel_shape'))} "
                             f"does not match W's spatial shape {kernel}")
        auto_pad = self.attr("auto_pad")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        g = conv_transpose_geometry(
            "ConvTranspose", X.shape[2:], kernel, strides=self.attr("strides"),
            dilations=self.attr("dilations"), pads=self.attr("pads"), auto_pad=auto_pad,
            output_padding=self.attr("output_padding"),
            output_shape=self.attr("output_shape"))
        return dict(group=group, kernel=kernel, strides=g.strides, dilations=g.dilations,
                    full=g.full, begin=tuple(g.pads_begin), output=g.output,
                    filters=filters)

    @staticmethod
    def _kernel_slices(g):
        """(k, slices into the full output) per kernel position k (row-major) for the
        input positions that reach it."""
        for k, position in enumerate(itertools.product(*(range(n) for n in g["kernel"]))):
            yield k, tuple(slice(p * d, p * d + (n - 1) * s + 1, s) for p, d, n, s in
                           zip(position, g["dilations"], g["input"], g["strides"]))

    def forward(self, X, W, B=None):
        g = self._geometry(X, W, B)
        g["input"] = X.shape[2:]
        N, C = X.shape[:2]
        group, filters = g["group"], g["filters"]
        K = int(np.prod(g["kernel"], dtype=np.int64))
        x = X.reshape(N, group, C // group, -1).transpose(1, 2, 0, 3).reshape(group, C // group,
                                                                             -1)
        w = W.reshape(group, C // group, -1)
        cols = np.matmul(w.swapaxes(1, 2), x).reshape((filters, K, N) + X.shape[2:])
        full = np.zeros((filters, N) + g["full"], X.dtype)
        for k, slices in self._kernel_slices(g):
            full[(Ellipsis,) + slices] += cols[:, k]
        Y = np.zeros((filters, N) + g["output"], X.dtype)
        full_index, out_index = _overlap(g["begin"], g["full"], g["output"])
        Y[out_index] = full[full_index]
        Y = np.ascontiguousarray(Y.swapaxes(0, 1))
        if B is not None:
            Y += B.reshape((-1,) + (1,) * (X.ndim - 2))
        return Y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, W = fwd_inputs[0], fwd_inputs[1]
        B = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        g = self._geometry(X, W, B)
        g["input"] = X.shape[2:]
        dY = grads[0]
        N, C = X.shape[:2]
        group, filters = g["group"], g["filters"]
        K = int(np.prod(g["kernel"], dtype=np.int64))
        dfull = np.zeros((filters, N) + g["full"], X.dtype)
        full_index, out_index = _overlap(g["begin"], g["full"], g["output"])
        dfull[full_index] = dY.swapaxes(0, 1)[out_index]
        dcols = np.empty((filters, K, N) + X.shape[2:], X.dtype)
        for k, slices in self._kernel_slices(g):
            dcols[:, k] = dfull[(Ellipsis,) + slices]
        dcols = dcols.reshape(group, -1, N * int(np.prod(X.shape[2:], dtype=np.int64)))
        x = X.reshape(N, group, C // group, -1).transpose(1, 2, 0, 3).reshape(group, C // group,
                                                                             -1)
        w = W.reshape(group, C // group, -1)
        dx = np.matmul(w, dcols).reshape((group, C // group, N) + X.shape[2:])
        dX = np.ascontiguousarray(np.moveaxis(dx.reshape((C, N) + X.shape[2:]), 0, 1))
        dW = np.matmul(x, dcols.swapaxes(1, 2)).reshape(W.shape)
        result = [dX, dW]
        if len(fwd_inputs) > 2:
            result.append(None if B is None else dY.sum(axis=(0,) + tuple(range(2, X.ndim))))
        return result
