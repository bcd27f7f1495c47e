"""MaxUnpool: the partial inverse of MaxPool: each X value is written at its MaxPool
index (flat over the whole tensor of the inferred shape (N, C, (in - 1)·stride -
pads_begin - pads_end + kernel ...)), zeros elsewhere; an output_shape larger than the
inferred one extends every axis with zeros at the end (as onnx's reference does).
https://onnx.ai/onnx/operators/onnx__MaxUnpool.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("MaxUnpool")
class MaxUnpool(ReferenceOp):
    defaults = {"kernel_shape": None, "pads": None, "strides": None}

    def _shapes(self, X, I, output_shape):
        if X.ndim < 3:
            raise ShapeError(f"MaxUnpool: X must be (N, C, *spatial), got shape "
                             f"{list(X.shape)}")
        rank = X.ndim - 2
        kernel = self.attr("kernel_shape")
        if kernel is None or len(kernel) != rank:
            raise ShapeError(f"MaxUnpool: kernel_shape={kernel} must be given with {rank} "
                             f"values")
        strides = self.attr("strides") or [1] * rank
        pads = self.attr("pads") or [0] * (2 * rank)
        if len(strides) != rank or len(pads) != 2 * rank:
            raise ShapeError(f"MaxUnpool: strides {list(strides)} and pads {list(pads)} must "
                             f"have {rank} and {2 * rank} values")
        inferred = X.shape[:2] + tuple(
            (n - 1) * s - (pads[i] + pads[i + rank]) + k
            for i, (n, s, k) in enumerate(zip(X.shape[2:], strides, kernel)))
        if np.shape(I) != X.shape or not np.issubdtype(np.asarray(I).dtype, np.integer):
            raise ShapeError(f"MaxUnpool: indices I must be integers shaped like X "
                             f"{list(X.shape)}, got {np.asarray(I).dtype} {list(np.shape(I))}")
        size = int(np.prod(inferred))
        if I.size and (I.min() < 0 or I.max() >= size):
            raise ShapeError(f"MaxUnpool: indices must lie in [0, {size}) (flat positions "
                             f"in the unpooled shape {list(inferred)})")
        shape = inferred
        if output_shape is not None:
            shape = tuple(int(v) for v in np.asarray(output_shape).ravel())
            if len(shape) != X.ndim or any(o < n for o, n in zip(shape, inferred)):
                raise ShapeError(f"MaxUnpool: output_shape {list(shape)} must have rank "
                                 f"{X.ndim} and be at least the inferred shape "
                                 f"{list(inferred)} on every axis")
        return inferred, shape

    def forward(self, X, I, output_shape=None):
        X, I = np.asarray(X), np.asarray(I)
        inferred, shape = self._shapes(X, I, output_shape)
        flat = np.zeros(int(np.prod(inferred)), X.dtype)
        flat[I.ravel()] = X.ravel()
        Y = np.zeros(shape, X.dtype)
        Y[tuple(slice(0, n) for n in inferred)] = flat.reshape(inferred)
        return Y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, I = np.asarray(fwd_inputs[0]), np.asarray(fwd_inputs[1])
        others = [None] * (len(fwd_inputs) - 1)
        if not np.issubdtype(X.dtype, np.floating):
            return [None] + others
        inferred, _ = self._shapes(X, I, fwd_inputs[2] if len(fwd_inputs) > 2 else None)
        dflat = grads[0][tuple(slice(0, n) for n in inferred)].ravel()
        # Where indices repeat, the forward's last write wins; only it gets a gradient.
        order = np.arange(I.size)
        last = np.full(dflat.size, -1)
        last[I.ravel()] = order
        winner = last[I.ravel()] == order
        return [np.where(winner, dflat[I.ravel()], 0).reshape(X.shape).astype(X.dtype)] + others
