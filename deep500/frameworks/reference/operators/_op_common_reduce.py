"""Shared by the Reduce* operators (opset 18 style): optional int64 ``axes`` input, with
``keepdims`` and ``noop_with_empty_axes`` attributes. With no axes and
noop_with_empty_axes=1 nothing is reduced but the elementwise part of the reduction still
applies (ReduceSumSquare squares, ReduceL1 takes absolute values, ...), as the spec says.
https://onnx.ai/onnx/operators/onnx__ReduceSum.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.onnx_interop.axes import distinct_axes


class Reduce(ReferenceOp):
    """A reduction. Subclasses implement ``reduce(data, axes)`` (keeping dimensions) and
    ``reduce_backward(dY, data, Y, axes)`` with dY and Y broadcastable to the data."""
    defaults = {"keepdims": 1, "noop_with_empty_axes": 0}

    def reduced_axes(self, rank: int, axes) -> tuple:
        """The sorted non-negative axes to reduce; () (reduce none) for empty axes with
        noop_with_empty_axes=1."""
        if axes is None or np.size(axes) == 0:
            return () if self.attr("noop_with_empty_axes") else tuple(range(rank))
        return tuple(sorted(distinct_axes(self.op_type, axes, rank,
                                          f"an input of rank {rank}")))

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


class SumOfTerms(Reduce):
    """ReduceSum, ReduceL1, ReduceSumSquare: Σ term(x) over the axes, whose gradient is
    dY·term'(x). Subclasses name ``term`` and ``term_derivative`` (the identity's by
    default)."""

    @staticmethod
    def term(x):
        return x

    @staticmethod
    def term_derivative(x):
        return 1

    def reduce(self, data, axes):
        return np.sum(self.term(data), axis=axes, keepdims=True)

    def reduce_backward(self, dY, data, Y, axes):
        return dY * self.term_derivative(data)


def extreme_value(dtype: np.dtype, highest: bool):
    """The highest (or lowest) value of ``dtype``: what an empty maximum (minimum) gives.
    Floats, extension types such as bfloat16 included, give ±inf."""
    if dtype == np.bool_:
        return highest
    if dtype.kind in "iu":
        return np.iinfo(dtype).max if highest else np.iinfo(dtype).min
    return dtype.type(np.inf if highest else -np.inf)


class ExtremeReduce(Reduce):
    """ReduceMax and ReduceMin: ``pick`` (np.max or np.min), whose reduction of no
    elements gives the opposite extreme of the type (``lowest_start``: the lowest, for a
    maximum). The gradient is shared equally by the elements that tie for the extreme,
    as PyTorch's ``amax`` and ``amin`` share it."""
    pick = None
    lowest_start = True

    def reduce(self, data, axes):
        start = extreme_value(data.dtype, highest=not self.lowest_start)
        return type(self).pick(data, axis=axes, keepdims=True, initial=start)

    def reduce_backward(self, dY, data, Y, axes):
        winners = data == Y
        ties = winners.sum(axis=axes, keepdims=True).astype(data.dtype)
        return dY * winners / ties
