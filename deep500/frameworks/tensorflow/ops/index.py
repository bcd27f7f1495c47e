"""TensorFlowVisitor: the index family (``deep500/frameworks/families.py``), gathering,
scattering and selecting by index: https://onnx.ai/onnx/operators/. Negative indices count
from the end of their axis; constant operands of Gather stay NumPy.
"""
from __future__ import annotations

import math

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr, _text
from deep500.frameworks.tensorflow.ops._values import _axis, _is_np, _tf_dtype


def _wrap_negative(indices, size):
    """Negative indices counted from the end of an axis of ``size`` elements."""
    indices = tf.convert_to_tensor(indices)
    size = tf.cast(size, indices.dtype)
    return tf.where(indices < 0, indices + size, indices)


def _scatter_nd(data, indices, updates, reduction):
    """ONNX ScatterND (https://onnx.ai/onnx/operators/onnx__ScatterND.html) on tensors,
    negative indices already wrapped."""
    if reduction == "none":
        return tf.tensor_scatter_nd_update(data, indices, updates)
    if reduction == "add":
        return tf.tensor_scatter_nd_add(data, indices, updates)
    if reduction == "max":
        return tf.tensor_scatter_nd_max(data, indices, updates)
    if reduction == "min":
        return tf.tensor_scatter_nd_min(data, indices, updates)
    # mul: a product per addressed slice (1 where none), then one multiplication.
    depth = indices.shape[-1]
    dims = tf.shape(data, out_type=tf.int64)
    leading = dims[:depth]
    strides = tf.math.cumprod(leading, exclusive=True, reverse=True)
    linear = tf.reduce_sum(tf.cast(indices, tf.int64) * strides, axis=-1)
    rows = tf.reduce_prod(leading)
    data2 = tf.reshape(data, tf.stack([rows, -1]))
    updates2 = tf.reshape(updates, tf.stack([tf.size(linear, out_type=tf.int64), -1]))
    factors = tf.math.unsorted_segment_prod(updates2, tf.reshape(linear, [-1]), rows)
    return tf.reshape(data2 * factors, dims)


def _element_coordinates(indices, axis):
    """Full coordinates (shape indices.shape + [rank]) of ScatterElements' targets: each
    element's own position with ``axis`` replaced by its index."""
    rank = len(indices.shape)
    grids = tf.meshgrid(*[tf.range(tf.shape(indices, out_type=tf.int64)[a])
                          for a in range(rank)], indexing="ij")
    grids[axis] = tf.cast(indices, tf.int64)
    return tf.stack(grids, axis=-1)


def _unique_rows(rows, n_cols, keep_sorted):
    """(first index, inverse, counts) of the distinct rows of a 2-D tensor, distinct rows
    ordered lexicographically, or by first occurrence when not ``keep_sorted``."""
    n = tf.shape(rows, out_type=tf.int64)[0]
    perm = tf.range(n)
    for column in reversed(range(n_cols)):   # stable sorts, least significant first
        keys = tf.gather(rows[:, column], perm)
        perm = tf.gather(perm, tf.argsort(keys, stable=True))
    ordered = tf.gather(rows, perm)
    new_group = tf.reduce_any(tf.not_equal(ordered[1:], ordered[:-1]), axis=1)
    group = tf.cumsum(tf.cast(tf.concat([[False], new_group], 0), tf.int64))
    groups = group[-1] + 1
    first = tf.math.unsorted_segment_min(perm, group, groups)
    counts = tf.math.unsorted_segment_sum(tf.ones_like(group), group, groups)
    inverse = tf.scatter_nd(perm[:, None], group, tf.reshape(n, [1]))
    if not keep_sorted:
        order = tf.argsort(first, stable=True)
        first, counts = tf.gather(first, order), tf.gather(counts, order)
        inverse = tf.gather(tf.cast(tf.math.invert_permutation(order), tf.int64), inverse)
    return first, inverse, counts


class IndexOps:
    """``visit_<op>`` of the index family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_gather(self, op, network) -> None:
        """Gather along ``axis``; negative indices count from the end."""
        axis = int(op.attributes.get("axis") or 0)

        def gather(data, indices):
            rank = len(data.shape)
            along = _axis(axis, rank)
            if _is_np(data, indices):
                return np.take(data, indices, axis=along)
            dim = data.shape[along]
            if isinstance(indices, np.ndarray) and dim is not None:
                indices = np.where(indices < 0, indices + dim, indices)
            elif not isinstance(indices, np.ndarray) or np.any(indices < 0):
                indices = tf.convert_to_tensor(indices)
                size = dim if dim is not None else tf.shape(data, out_type=indices.dtype)[along]
                indices = tf.where(indices < 0, indices + tf.cast(size, indices.dtype), indices)
            return tf.gather(data, indices, axis=along)
        self.emit(gather, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_gatherelements(self, op, network) -> None:
        """GatherElements: out[i][j][k] = data[index[i][j][k]][j][k] (for axis 0), negative
        indices counting from the end."""
        axis = int(op.attributes.get("axis") or 0)

        def gather_elements(data, indices):
            along = _axis(axis, len(data.shape))
            indices = tf.convert_to_tensor(indices)
            size = tf.cast(tf.shape(data)[along], indices.dtype)
            indices = tf.where(indices < 0, indices + size, indices)
            return tf.experimental.numpy.take_along_axis(tf.convert_to_tensor(data), indices,
                                                         along)
        self.emit(gather_elements, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_onehot(self, op, network) -> None:
        """OneHot: https://onnx.ai/onnx/operators/onnx__OneHot.html (negative indices
        count from depth)."""
        axis = int(_attr(op, "axis", -1))

        def one_hot(indices, depth, values):
            indices = tf.convert_to_tensor(indices)
            size = tf.reshape(tf.cast(depth, tf.int64), [])
            where = axis if axis >= -1 else axis + len(indices.shape) + 1
            index = _wrap_negative(tf.cast(indices, tf.int64), size)
            values = tf.convert_to_tensor(values)
            return tf.one_hot(index, tf.cast(size, tf.int32), on_value=values[1],
                              off_value=values[0], axis=where, dtype=_tf_dtype(values))
        self.emit(one_hot, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_gathernd(self, op, network) -> None:
        """GatherND: https://onnx.ai/onnx/operators/onnx__GatherND.html"""
        batch_dims = int(_attr(op, "batch_dims", 0))

        def gather_nd(data, indices):
            data, indices = tf.convert_to_tensor(data), tf.convert_to_tensor(indices)
            depth = indices.shape[-1]
            dims = tf.shape(data, out_type=indices.dtype)[batch_dims:batch_dims + depth]
            return tf.gather_nd(data, _wrap_negative(indices, dims), batch_dims=batch_dims)
        self.emit(gather_nd, [self.key(n) for n in op.inputs], op.outputs[0])

    def _reduction(self, op) -> str:
        reduction = _text(op.attributes.get("reduction"), "none")
        if reduction not in ("none", "add", "mul", "max", "min"):
            raise self.node_error(op, f"reduction {reduction!r} is not one of none, add, "
                                      f"mul, max, min; fix the node's attribute")
        return reduction

    def visit_scatternd(self, op, network) -> None:
        """ScatterND: https://onnx.ai/onnx/operators/onnx__ScatterND.html"""
        reduction = self._reduction(op)

        def scatter_nd(data, indices, updates):
            data, indices = tf.convert_to_tensor(data), tf.convert_to_tensor(indices)
            depth = indices.shape[-1]
            indices = _wrap_negative(indices, tf.shape(data, out_type=indices.dtype)[:depth])
            return _scatter_nd(data, indices, tf.cast(updates, _tf_dtype(data)), reduction)
        self.emit(scatter_nd, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_scatterelements(self, op, network) -> None:
        """ScatterElements: https://onnx.ai/onnx/operators/onnx__ScatterElements.html"""
        reduction = self._reduction(op)
        axis = int(_attr(op, "axis", 0))

        def scatter_elements(data, indices, updates):
            data, indices = tf.convert_to_tensor(data), tf.convert_to_tensor(indices)
            along = _axis(axis, len(data.shape))
            indices = _wrap_negative(indices, tf.shape(data, out_type=indices.dtype)[along])
            return _scatter_nd(data, _element_coordinates(indices, along),
                               tf.cast(updates, _tf_dtype(data)), reduction)
        self.emit(scatter_elements, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_scatter(self, op, network) -> None:
        """Scatter (deprecated): ScatterElements without reduction
        (https://onnx.ai/onnx/operators/onnx__Scatter.html)."""
        self.visit_scatterelements(op, network)

    def visit_tensorscatter(self, op, network) -> None:
        """TensorScatter: ``update`` written into the cache along ``axis`` from each
        batch entry's write index, modulo the axis length in circular mode
        (https://onnx.ai/onnx/operators/onnx__TensorScatter.html)."""
        axis = int(_attr(op, "axis", -2))
        mode = _text(op.attributes.get("mode"), "linear")
        if mode not in ("linear", "circular"):
            raise self.node_error(op, f"TensorScatter mode {mode!r} is not 'linear' or "
                                      f"'circular'; fix the node's attribute")

        def tensor_scatter(cache, update, write_indices=None):
            cache, update = tf.convert_to_tensor(cache), tf.convert_to_tensor(update)
            rank = len(cache.shape)
            along = _axis(axis, rank)
            perm = [0, along] + [a for a in range(1, rank) if a != along]
            moved_cache, moved_update = tf.transpose(cache, perm), tf.transpose(update, perm)
            dims = tf.shape(moved_update, out_type=tf.int64)
            length = tf.shape(moved_cache, out_type=tf.int64)[1]
            start = (tf.zeros([dims[0]], tf.int64) if write_indices is None
                     else tf.cast(tf.reshape(write_indices, [-1]), tf.int64))
            positions = start[:, None] + tf.range(dims[1])[None, :]
            if mode == "circular":
                positions = tf.math.floormod(positions, length)
            batch = tf.broadcast_to(tf.range(dims[0])[:, None], tf.shape(positions))
            indices = tf.stack([batch, positions], axis=-1)
            written = tf.tensor_scatter_nd_update(moved_cache, indices,
                                                  tf.cast(moved_update, _tf_dtype(cache)))
            return tf.transpose(written, list(np.argsort(perm)))
        self.emit(tensor_scatter, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_reversesequence(self, op, network) -> None:
        """ReverseSequence: per batch entry, the first sequence_lens[i] elements along
        ``time_axis`` reversed, the rest copied."""
        batch_axis = int(_attr(op, "batch_axis", 1))
        time_axis = int(_attr(op, "time_axis", 0))

        def reverse_sequence(x, lengths):
            x = tf.convert_to_tensor(x)
            rank = len(x.shape)
            b, t = _axis(batch_axis, rank), _axis(time_axis, rank)
            perm = [b, t] + [a for a in range(rank) if a not in (b, t)]
            moved = tf.transpose(x, perm)
            steps = tf.range(tf.shape(moved, out_type=tf.int64)[1])[None, :]
            lengths = tf.cast(tf.reshape(lengths, [-1, 1]), tf.int64)
            source = tf.where(steps < lengths, lengths - 1 - steps, steps)
            reversed_ = tf.gather(moved, source, axis=1, batch_dims=1)
            return tf.transpose(reversed_, list(np.argsort(perm)))
        self.emit(reverse_sequence, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_compress(self, op, network) -> None:
        """Compress: the slices along ``axis`` (of the flattened input without an axis)
        where ``condition`` is true; a shorter condition leaves the rest out."""
        axis = op.attributes.get("axis")

        def compress(x, condition):
            x = tf.convert_to_tensor(x)
            if axis is None:
                x, along = tf.reshape(x, [-1]), 0
            else:
                along = _axis(int(axis), len(x.shape))
            condition = tf.cast(tf.reshape(condition, [-1]), tf.bool)
            size = tf.shape(x)[along]
            missing = tf.maximum(size - tf.size(condition), 0)
            condition = tf.concat([condition, tf.zeros([missing], tf.bool)], 0)[:size]
            return tf.boolean_mask(x, condition, axis=along)
        self.emit(compress, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_nonzero(self, op, network) -> None:
        """NonZero: the (rank, count) int64 coordinates of the non-zero elements, in
        row-major order."""
        def nonzero(x):
            x = tf.convert_to_tensor(x)
            hit = x if _tf_dtype(x) == tf.bool else tf.not_equal(x, tf.zeros([], _tf_dtype(x)))
            return tf.transpose(tf.where(hit))
        self.emit(nonzero, [self.key(op.inputs[0])], op.outputs[0], rank=2)

    def visit_unique(self, op, network) -> None:
        """Unique: https://onnx.ai/onnx/operators/onnx__Unique.html (outputs Y,
        indices of first occurrences, inverse indices, counts)."""
        axis = op.attributes.get("axis")
        keep_sorted = bool(_attr(op, "sorted", 1))
        dynamic_error = self.node_error(
            op, "Unique along an axis needs the other axes' sizes when the model is built; "
                "give the input a static shape")

        def unique(x):
            x = tf.convert_to_tensor(x)
            if axis is None:
                moved, along = tf.reshape(x, [-1]), 0
                rows, n_cols = moved[:, None], 1
            else:
                along = _axis(int(axis), len(x.shape))
                perm = [along] + [a for a in range(len(x.shape)) if a != along]
                moved = tf.transpose(x, perm)
                other = list(moved.shape[1:])
                if None in other:
                    raise dynamic_error
                n_cols = math.prod(other)
                rows = tf.reshape(moved, [-1, n_cols])
            first, inverse, counts = _unique_rows(rows, n_cols, keep_sorted)
            y = tf.gather(moved, first)
            if axis is not None:
                y = tf.transpose(y, list(np.argsort(perm)))
            return y, first, inverse, counts
        self.emit(unique, [self.key(op.inputs[0])], list(op.outputs))
