"""Shared by CumSum and CumProd: a scan along the ``axis`` input, optionally
``exclusive`` (output i combines the elements before i, starting from the identity) and
``reverse`` (from the end of the axis).
https://onnx.ai/onnx/operators/onnx__CumSum.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import normalize_axis
from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError


class Cumulative(ReferenceOp):
    """Subclasses name the ``ufunc`` whose accumulation is the scan (its identity starts
    an exclusive scan) and implement ``scan_backward(dY, x, Y, axis)`` (for the
    inclusive forward scan)."""
    defaults = {"exclusive": 0, "reverse": 0}
    ufunc: np.ufunc = None

    def scan(self, x, axis):
        """The inclusive forward scan, in x's type."""
        return self.ufunc.accumulate(x, axis=axis, dtype=x.dtype)

    def _axis(self, x, axis) -> int:
        axis = np.asarray(axis)
        if axis.size != 1 or not np.issubdtype(axis.dtype, np.integer):
            raise ShapeError(f"{self.op_type}: axis must be one int32 or int64 value, got "
                             f"{axis!r}")
        return normalize_axis(self.op_type, axis.reshape(-1)[0], x.ndim)

    def _shifted(self, x, axis):
        """x moved one step along ``axis`` (the identity enters at the start)."""
        if x.shape[axis] == 0:
            return x
        pad = np.full_like(np.take(x, [0], axis=axis), self.ufunc.identity)
        return np.concatenate([pad, np.take(x, np.arange(x.shape[axis] - 1), axis=axis)],
                              axis=axis)

    def forward(self, x, axis):
        x = np.asarray(x)
        axis = self._axis(x, axis)
        if self.attr("reverse"):
            x = np.flip(x, axis)
        if self.attr("exclusive"):
            x = self._shifted(x, axis)
        y = np.asarray(self.scan(x, axis)).astype(x.dtype, copy=False)
        return np.flip(y, axis).copy() if self.attr("reverse") else y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = np.asarray(fwd_inputs[0])
        if not np.issubdtype(x.dtype, np.floating):
            return [None, None]
        if grads[0] is None:
            return [np.zeros_like(x), None]
        axis = self._axis(x, fwd_inputs[1])
        dY, forward_x = np.asarray(grads[0]), x
        if self.attr("reverse"):
            dY, forward_x = np.flip(dY, axis), np.flip(x, axis)
        if self.attr("exclusive"):
            # Y_excl[i] = Y_incl[i - 1] of the input without its last element.
            head = np.take(forward_x, np.arange(max(x.shape[axis] - 1, 0)), axis=axis)
            d_head = self.scan_backward(np.take(dY, np.arange(1, x.shape[axis]), axis=axis),
                                        head, self.scan(head, axis), axis)
            tail = np.zeros_like(np.take(x, [0], axis=axis)) if x.shape[axis] else \
                np.zeros_like(x)
            dX = np.concatenate([d_head, tail], axis=axis) if x.shape[axis] else tail
        else:
            dX = self.scan_backward(dY, forward_x, self.scan(forward_x, axis), axis)
        dX = np.flip(dX, axis) if self.attr("reverse") else dX
        return [np.ascontiguousarray(dX, dtype=x.dtype), None]


def reverse_cumsum(x, axis):
    """Sums from each position to the end of ``axis``."""
    return np.flip(np.cumsum(np.flip(x, axis), axis=axis), axis)
