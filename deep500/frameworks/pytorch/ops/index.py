"""The index family in PyTorch: gathering, scattering and selecting by index (Gather,
GatherElements, GatherND, Scatter, ScatterElements, ScatterND, TensorScatter, OneHot,
Compress, NonZero, Unique, ReverseSequence). https://onnx.ai/onnx/operators/
"""
from __future__ import annotations

import math

from deep500.utils.errors import ShapeError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _normalized(index, size):
    """ONNX indices may be negative (counted from the end)."""
    return torch.where(index < 0, index + size, index).long()


class IndexOps:
    """``visit_<op>`` of the index family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_gather(self, op, network):
        axis = op.attributes["axis"]
        indices = self._known(op.inputs[1])
        if indices is not None and indices.dim() == 0:
            index = int(indices)
            self._emit(op, lambda x: x.select(axis, index), op.inputs[:1])
            return
        rank = self._rank(op.inputs[0])
        to_long = self._dtype(op.inputs[1]) != torch.int64
        if rank is not None or axis >= 0:
            # Advanced indexing with one index tensor is Gather, negatives included.
            lead = (slice(None),) * (axis % rank if axis < 0 else axis)
            if to_long:
                self._emit(op, lambda x, i: x[lead + (i.long(),)])
            else:
                self._emit(op, lambda x, i: x[lead + (i,)])
            return
        self._emit(op, lambda x, i: x[(slice(None),) * (axis % x.dim()) + (i.long(),)])

    def visit_gatherelements(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__GatherElements.html"""
        axis = op.attributes["axis"]
        self._emit(op, lambda x, i: torch.gather(x, axis, _normalized(i, x.shape[axis])))

    def visit_gathernd(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__GatherND.html"""
        batch_dims = op.attributes["batch_dims"]

        def gather_nd(x, indices):
            depth = indices.shape[-1]
            batch = x.shape[:batch_dims]
            if depth > x.dim() - batch_dims:
                raise ShapeError(f"GatherND: indices.shape[-1]={depth} exceeds the "
                                 f"{x.dim() - batch_dims} dimensions of data after "
                                 f"batch_dims={batch_dims}")
            flat_x = x.reshape((math.prod(batch),) + tuple(x.shape[batch_dims:]))
            flat_i = indices.reshape((math.prod(batch), -1, depth))
            key = [torch.arange(flat_x.shape[0], device=x.device).view(-1, 1)]
            key += [_normalized(flat_i[..., j], flat_x.shape[1 + j]) for j in range(depth)]
            gathered = flat_x[tuple(key)]
            return gathered.reshape(tuple(indices.shape[:-1])
                                    + tuple(x.shape[batch_dims + depth:]))
        self._emit(op, gather_nd)

    def visit_scatternd(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__ScatterND.html"""
        reduction = op.attributes.get("reduction") or "none"
        reduce = {"mul": "prod", "max": "amax", "min": "amin"}
        if reduction not in ("none", "add") and reduction not in reduce:
            raise self.node_error(op, f"reduction {reduction!r} is not one of none, add, "
                                  f"mul, max, min", ShapeError)

        def scatter_nd(x, indices, updates):
            depth = indices.shape[-1]
            lead = x.shape[:depth]
            strides = [math.prod(lead[j + 1:]) for j in range(depth)]
            flat_i = indices.reshape(-1, depth)
            linear = sum(_normalized(flat_i[:, j], lead[j]) * strides[j]
                         for j in range(depth))
            rest = tuple(x.shape[depth:])
            flat_x = x.reshape((math.prod(lead),) + rest)
            flat_u = updates.reshape((-1,) + rest)
            if reduction == "none":
                result = flat_x.index_copy(0, linear, flat_u)
            elif reduction == "add":
                result = flat_x.index_add(0, linear, flat_u)
            else:
                rows = linear.view((-1,) + (1,) * len(rest)).expand(flat_u.shape)
                result = flat_x.scatter_reduce(0, rows, flat_u, reduce[reduction])
            return result.reshape(x.shape)
        self._emit(op, scatter_nd)

    def visit_scatterelements(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__ScatterElements.html"""
        axis = op.attributes["axis"]
        reduction = op.attributes.get("reduction") or "none"
        reduce = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}
        if reduction != "none" and reduction not in reduce:
            raise self.node_error(op, f"reduction {reduction!r} is not one of none, add, "
                                  f"mul, max, min", ShapeError)

        def scatter_elements(x, indices, updates):
            index = _normalized(indices, x.shape[axis])
            if reduction == "none":
                return torch.scatter(x, axis, index, updates)
            return torch.scatter_reduce(x, axis, index, updates, reduce[reduction])
        self._emit(op, scatter_elements)

    def visit_scatter(self, op, network):
        """Scatter (deprecated in opset 11) is ScatterElements without reduction.
        https://onnx.ai/onnx/operators/onnx__Scatter.html"""
        self.visit_scatterelements(op, network)

    def visit_tensorscatter(self, op, network):
        """Writes ``update`` into the cache along ``axis`` from each batch entry's
        write index (modulo the cache length in 'circular' mode).
        https://onnx.ai/onnx/operators/onnx__TensorScatter.html"""
        axis = op.attributes["axis"]
        circular = op.attributes.get("mode") == "circular"

        def tensor_scatter(past, update, write_indices=None):
            dim = axis % past.dim()
            length, capacity = update.shape[dim], past.shape[dim]
            batch = past.shape[0]
            start = (torch.zeros(batch, dtype=torch.int64, device=past.device)
                     if write_indices is None else write_indices.long())
            positions = start.view(-1, 1) + torch.arange(length, device=past.device)
            if circular:
                positions = positions % capacity
            shape = [1] * past.dim()
            shape[0], shape[dim] = batch, length
            index = positions.view(shape).expand(update.shape)
            return past.scatter(dim, index, update)
        self._emit(op, tensor_scatter)

    def visit_reversesequence(self, op, network):
        """Reverses the first sequence_lens[i] steps of batch entry i along time_axis.
        https://onnx.ai/onnx/operators/onnx__ReverseSequence.html"""
        batch_axis = op.attributes["batch_axis"]
        time_axis = op.attributes["time_axis"]

        def reverse_sequence(x, lengths):
            steps = torch.arange(x.shape[time_axis], device=x.device)
            lengths = lengths.long().view(-1, 1)
            source = torch.where(steps < lengths, lengths - 1 - steps, steps)  # [B, T]
            if batch_axis > time_axis:
                source = source.t()
            shape = [1] * x.dim()
            shape[batch_axis], shape[time_axis] = x.shape[batch_axis], x.shape[time_axis]
            return torch.gather(x, time_axis, source.reshape(shape).expand(x.shape))
        self._emit(op, reverse_sequence)

    def visit_compress(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Compress.html"""
        axis = op.attributes.get("axis")

        def compress(x, condition):
            chosen = torch.nonzero(condition.reshape(-1)).reshape(-1)
            if axis is None:
                return x.reshape(-1).index_select(0, chosen)
            return x.index_select(axis, chosen)
        self._emit(op, compress)

    def visit_nonzero(self, op, network):
        """Indices of the non-zero elements, [rank, count], row-major order."""
        self._emit(op, lambda x: torch.nonzero(x).t().contiguous())

    def visit_unique(self, op, network):
        """Outputs Y, first-occurrence indices, inverse indices, counts.
        https://onnx.ai/onnx/operators/onnx__Unique.html"""
        axis = op.attributes.get("axis")
        ordered = bool(op.attributes.get("sorted", 1))
        outputs = len(op.outputs)

        def unique(x):
            flat = x.reshape(-1) if axis is None else x
            dim = 0 if axis is None else axis % x.dim()
            values, inverse, counts = torch.unique(flat, sorted=True, return_inverse=True,
                                                   return_counts=True, dim=dim)
            size = flat.shape[dim]
            positions = torch.arange(size, device=x.device)
            first = torch.full((values.shape[dim],), size, dtype=torch.int64,
                               device=x.device).scatter_reduce(0, inverse, positions,
                                                               "amin")
            if not ordered:  # in order of first occurrence
                order = torch.argsort(first)
                values = values.index_select(dim, order)
                first, counts = first[order], counts[order]
                inverse = torch.argsort(order)[inverse]
            return (values, first, inverse, counts)[:outputs] if outputs > 1 else values
        self._emit(op, unique)

    def visit_onehot(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__OneHot.html"""
        axis = op.attributes["axis"]

        def one_hot(indices, depth, values):
            size = int(depth.reshape(-1)[0])
            rank = indices.dim() + 1
            where = axis % rank
            index = indices.long()  # float indices truncate, as ONNX's cast does
            index = torch.where(index < 0, index + size, index).unsqueeze(where)
            shape = [1] * rank
            shape[where] = size
            hot = index == torch.arange(size, device=index.device).view(shape)
            return torch.where(hot, values[1], values[0])
        self._emit(op, one_hot)


__all__ = ["IndexOps"]
