"""TensorFlowVisitor: the reduction family (``deep500/frameworks/families.py``),
reductions over axes, arg-reductions, TopK and cumulative scans:
https://onnx.ai/onnx/operators/. A Reduce* over constant axes of a channels-last tensor
reduces its remapped axes in place.
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._layout import (CHANNELS_LAST, channels_last_axis,
                                                   ONNX_LAYOUT, to_channels_last_perm)
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr
from deep500.frameworks.tensorflow.ops._values import _axis, _ints, _tf_dtype


def _first_along(mask, axis, last=False):
    """The index of the first (or last) true element of ``mask`` along ``axis``."""
    size = tf.shape(mask, out_type=tf.int64)[axis]
    rank = len(mask.shape)
    shape = [1] * rank
    shape[axis] = -1
    positions = tf.reshape(tf.range(size), shape)
    if last:
        return tf.reduce_max(tf.where(mask, positions, -1), axis=axis)
    return tf.reduce_min(tf.where(mask, positions, size), axis=axis)


def _move_axis_last(x, axis):
    rank = len(x.shape)
    if axis == rank - 1:
        return x, None
    perm = [a for a in range(rank) if a != axis] + [axis]
    return tf.transpose(x, perm), list(np.argsort(perm))


def _in_float(fn):
    """A reduction computed in float64 for integer inputs, cast back (as ONNX's
    reference does for ReduceL2, ReduceLogSum, ReduceLogSumExp)."""
    def reduce(x, axis=None, keepdims=True):
        dtype = _tf_dtype(x)
        if dtype.is_floating:
            return fn(x, axis=axis, keepdims=keepdims)
        return tf.cast(fn(tf.cast(x, tf.float64), axis=axis, keepdims=keepdims), dtype)
    return reduce


def _reduce_l1(x, axis=None, keepdims=True):
    return tf.reduce_sum(tf.abs(x), axis=axis, keepdims=keepdims)


def _reduce_sum_square(x, axis=None, keepdims=True):
    return tf.reduce_sum(tf.square(x), axis=axis, keepdims=keepdims)


@_in_float
def _reduce_l2(x, axis=None, keepdims=True):
    return tf.sqrt(tf.reduce_sum(tf.square(x), axis=axis, keepdims=keepdims))


@_in_float
def _reduce_log_sum(x, axis=None, keepdims=True):
    return tf.math.log(tf.reduce_sum(x, axis=axis, keepdims=keepdims))


@_in_float
def _reduce_log_sum_exp(x, axis=None, keepdims=True):
    return tf.reduce_logsumexp(x, axis=axis, keepdims=keepdims)


class ReductionOps:
    """``visit_<op>`` of the reduction family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _reduce(self, op, tf_fn) -> None:
        """Reduce* over the ``axes`` input; no axes: all of them, or none with
        noop_with_empty_axes."""
        keepdims = op.attributes.get("keepdims")
        keepdims = True if keepdims is None else bool(keepdims)
        noop = bool(op.attributes.get("noop_with_empty_axes") or 0)
        axes, dynamic = self._axes_input(op)
        x = op.inputs[0]
        rank = self.rank(x)
        if (dynamic is None and axes is not None and rank is not None and axes
                and self.layout(x) == CHANNELS_LAST and self.propagate_layout):
            inner = sorted(channels_last_axis(a, rank) for a in axes)
            remaining = [to_channels_last_perm(rank)[j] for j in range(rank) if j not in inner]
            if keepdims or remaining == sorted(remaining):
                layout = CHANNELS_LAST if keepdims else ONNX_LAYOUT
                self.emit(lambda x: tf_fn(x, axis=inner, keepdims=keepdims),
                          [self.key(x, CHANNELS_LAST)], op.outputs[0], layout,
                          rank if keepdims else len(remaining))
                return

        def reduce(x, axes_input=None):
            chosen = axes
            if dynamic is not None:
                chosen = _ints(axes_input)
                if chosen is None:
                    return tf_fn(x, axis=axes_input, keepdims=keepdims)
            if not chosen:
                if noop:
                    return x
                chosen = None
            return tf_fn(x, axis=chosen, keepdims=keepdims)
        inputs = [self.key(x)] + ([self.key(dynamic)] if dynamic else [])
        self.emit(reduce, inputs, op.outputs[0])

    def visit_reducemean(self, op, network) -> None:
        self._reduce(op, tf.reduce_mean)

    def visit_reducesum(self, op, network) -> None:
        self._reduce(op, tf.reduce_sum)

    def visit_reducemax(self, op, network) -> None:
        def reduce_max(x, axis=None, keepdims=True):
            fn = tf.reduce_any if _tf_dtype(x) == tf.bool else tf.reduce_max
            return fn(x, axis=axis, keepdims=keepdims)
        self._reduce(op, reduce_max)

    def visit_reducemin(self, op, network) -> None:
        def reduce_min(x, axis=None, keepdims=True):
            fn = tf.reduce_all if _tf_dtype(x) == tf.bool else tf.reduce_min
            return fn(x, axis=axis, keepdims=keepdims)
        self._reduce(op, reduce_min)

    def _reduce_mapped(self, op, tf_fn) -> None:
        """A Reduce* whose elementwise part still applies with noop_with_empty_axes and
        no axes (ReduceL1 gives |x|, ReduceSumSquare x², as onnx's reference and the
        reference executor): a reduction over no axes; else the visitor's ``_reduce``."""
        if not bool(_attr(op, "noop_with_empty_axes", 0)):
            self._reduce(op, tf_fn)
            return
        axes, dynamic = self._axes_input(op)
        if dynamic is None and axes:
            self._reduce(op, tf_fn)
            return
        keepdims = bool(_attr(op, "keepdims", 1))

        def reduce(x, axes_input=None):
            chosen = [] if axes_input is None else _ints(axes_input)
            if chosen is None:
                return tf_fn(x, axis=axes_input, keepdims=keepdims)
            return tf_fn(x, axis=chosen, keepdims=keepdims)   # [] reduces nothing
        inputs = [self.key(op.inputs[0])] + ([self.key(dynamic)] if dynamic else [])
        self.emit(reduce, inputs, op.outputs[0], rank=self.rank(op.inputs[0]))

    def visit_reducel1(self, op, network) -> None:
        self._reduce_mapped(op, _reduce_l1)

    def visit_reducel2(self, op, network) -> None:
        self._reduce_mapped(op, _reduce_l2)

    def visit_reducelogsum(self, op, network) -> None:
        self._reduce_mapped(op, _reduce_log_sum)

    def visit_reducelogsumexp(self, op, network) -> None:
        self._reduce_mapped(op, _reduce_log_sum_exp)

    def visit_reduceprod(self, op, network) -> None:
        self._reduce_mapped(op, tf.reduce_prod)

    def visit_reducesumsquare(self, op, network) -> None:
        self._reduce_mapped(op, _reduce_sum_square)

    def _arg_extreme(self, op, largest: bool) -> None:
        axis = int(_attr(op, "axis", 0))
        keepdims = bool(_attr(op, "keepdims", 1))
        last = bool(_attr(op, "select_last_index", 0))
        extreme = tf.reduce_max if largest else tf.reduce_min

        def arg(x):
            x = tf.convert_to_tensor(x)
            along = _axis(axis, len(x.shape))
            if _tf_dtype(x) == tf.bool:
                x = tf.cast(x, tf.int8)
            hit = tf.equal(x, extreme(x, axis=along, keepdims=True))
            index = _first_along(hit, along, last)
            return tf.expand_dims(index, along) if keepdims else index
        self.emit(arg, [self.key(op.inputs[0])], op.outputs[0])

    def visit_argmax(self, op, network) -> None:
        """ArgMax: https://onnx.ai/onnx/operators/onnx__ArgMax.html (ties: the first
        index, or the last with select_last_index)."""
        self._arg_extreme(op, True)

    def visit_argmin(self, op, network) -> None:
        """ArgMin: as ArgMax, for the smallest element."""
        self._arg_extreme(op, False)

    def visit_topk(self, op, network) -> None:
        """TopK: https://onnx.ai/onnx/operators/onnx__TopK.html (ties: lower index
        first; the output is always sorted)."""
        axis = int(_attr(op, "axis", -1))
        largest = bool(_attr(op, "largest", 1))
        inputs = [self.key(op.inputs[0]), self.static_key(op.inputs[1])]

        def top_k(x, k):
            x = tf.convert_to_tensor(x)
            count = tf.reshape(tf.cast(k, tf.int32), [])
            moved, back = _move_axis_last(x, _axis(axis, len(x.shape)))
            order = tf.argsort(moved, axis=-1, stable=True,
                               direction="DESCENDING" if largest else "ASCENDING")
            indices = order[..., :count]
            values = tf.gather(moved, indices, batch_dims=len(x.shape) - 1)
            indices = tf.cast(indices, tf.int64)
            if back is not None:
                values, indices = tf.transpose(values, back), tf.transpose(indices, back)
            return values, indices
        self.emit(top_k, inputs, list(op.outputs))

    def _cumulative(self, op, tf_fn) -> None:
        exclusive = bool(_attr(op, "exclusive", 0))
        reverse = bool(_attr(op, "reverse", 0))
        dynamic_error = self._dynamic_error(op, "axis")

        def cumulative(x, axis):
            along = _ints(axis)
            if along is None:
                raise dynamic_error
            x = tf.convert_to_tensor(x)
            return tf_fn(x, axis=_axis(along[0], len(x.shape)),
                         exclusive=exclusive, reverse=reverse)
        self.emit(cumulative, [self.key(op.inputs[0]), self.static_key(op.inputs[1])],
                  op.outputs[0], rank=self.rank(op.inputs[0]))

    def visit_cumsum(self, op, network) -> None:
        """CumSum: https://onnx.ai/onnx/operators/onnx__CumSum.html"""
        self._cumulative(op, tf.math.cumsum)

    def visit_cumprod(self, op, network) -> None:
        """CumProd: https://onnx.ai/onnx/operators/onnx__CumProd.html"""
        self._cumulative(op, tf.math.cumprod)
