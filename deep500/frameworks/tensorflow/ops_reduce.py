"""TensorFlowVisitor: the Reduce* operators over the ``axes`` input.
https://onnx.ai/onnx/operators/onnx__ReduceSum.html
"""
from __future__ import annotations

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._tf_common import (CHANNELS_LAST, channels_last_axis,
                                                      _ints, ONNX_LAYOUT, _tf_dtype,
                                                      to_channels_last_perm)


class ReduceOps:
    """``visit_<op>`` of the reductions, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`, whose helpers they use
    (``emit``, ``key``, ``rank``, ``layout``, ``_value``, ``_unsupported``, ...)."""

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
