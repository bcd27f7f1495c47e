"""Shared by the Reduce* operators (opset 18 style): optional int64 ``axes`` input, with
``keepdims`` and ``noop_with_empty_axes`` attributes. With no axes and
noop_with_empty_axes=1 nothing is reduced but the elementwise part of the reduction still
applies (ReduceSumSquare squares, ReduceL1 takes absolute values, ...), as the spec says.
https://onnx.ai/onnx/operators/onnx__ReduceSum.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError


class Reduce(ReferenceOp):
    """A reduction. Subclasses implement ``reduce(data, axes)`` (keeping dimensions) and
    ``reduce_backward(dY, data, Y, axes)`` with dY and Y broadcastable to the data."""
    defaults = {"keepdims": 1, "noop_with_empty_axes": 0}

    def reduced_axes(self, rank: int, axes) -> tuple:
        """The sorted non-negative axes to reduce; () (reduce none) for empty axes with
        noop_with_empty_axes=1."""
        axes = [] if axes is None else [int(a) for a in np.asarray(axes, np.int64).reshape(-1)]
        if not axes:
            return () if self.attr("noop_with_empty_axes") else tuple(range(rank))
        if any(not -rank <= a < rank for a in axes):
            raise ShapeError(f"{self.op_type}: axes {axes} must lie in [{-rank}, {rank - 1}] "
                             f"for an input of rank {rank}")
        normalised = sorted(a % rank for a in axes)
        if len(set(normalised)) != len(normalised):
            raise ShapeError(f"{self.op_type}: axes {axes} name an axis twice")
        return tuple(normalised)

    def reduce(self, data, axes):
        raise NotImplementedError

    def reduce_backward(self, dY, data, Y, axes):
        raise NotImplementedError

    def forward(self, data, axes=None):
        data = np.asarray(data)
        reduced = self.reduced_axes(data.ndim, axes)
        Y = np.asarray(self.reduce(data, reduced)).astype(data.dtype, copy=False)
        return Y if self.attr("keepdims") else Y.reshape(
            [d for i, d in enumerate(data.shape) if i not in reduced])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data = np.asarray(fwd_inputs[0])
        rest = [None] * (len(fwd_inputs) - 1)
        if data.dtype.kind in "biu":   # integer and bool reductions have no gradient
            return [None] + rest
        if grads[0] is None:
            return [np.zeros_like(data)] + rest
        reduced = self.reduced_axes(data.ndim, fwd_inputs[1] if len(fwd_inputs) > 1 else None)
        dY = np.asarray(grads[0])
        # Restore the reduced axes (as 1s) so that dY and Y broadcast against the data.
        kept = [1 if i in reduced else d for i, d in enumerate(data.shape)]
        dX = self.reduce_backward(dY.reshape(kept), data,
                                  np.asarray(fwd_outputs[0]).reshape(kept), reduced)
        dX = np.broadcast_to(dX, data.shape).astype(data.dtype)
        return [dX] + rest
