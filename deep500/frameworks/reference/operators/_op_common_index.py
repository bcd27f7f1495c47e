"""Shared by the indexing operators (Gather*, Scatter*, ArgMax/ArgMin, TopK, ...): axis and
index checks, and gathers and scatters written as one NumPy advanced index (a tuple of
index arrays) so that forward and backward are each a single vectorized call.
https://onnx.ai/onnx/operators/onnx__GatherElements.html
https://onnx.ai/onnx/operators/onnx__ScatterND.html"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError, UnsupportedError

REDUCTIONS = ("none", "add", "mul", "max", "min")


def normalize_axis(op_type: str, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in [0, rank), from a value in [-rank, rank)."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise ShapeError(f"{op_type}: {what} {axis} is outside [{-rank}, {rank - 1}] for an "
                         f"input of rank {rank}; pass an axis of the input")
    return axis % rank


def integer_indices(op_type: str, indices, name: str = "indices") -> np.ndarray:
    """``indices`` as an int64 array; a ShapeError unless they are integers."""
    indices = np.asarray(indices)
    if not np.issubdtype(indices.dtype, np.integer):
        raise ShapeError(f"{op_type}: {name} must be int32 or int64, got {indices.dtype}")
    return indices.astype(np.int64, copy=False)


def wrap_indices(op_type: str, indices: np.ndarray, extent: int, where: str) -> np.ndarray:
    """Indices in [-extent, extent) made non-negative; a ShapeError for any outside."""
    if indices.size and (indices.min() < -extent or indices.max() >= extent):
        raise ShapeError(f"{op_type}: indices must lie in [{-extent}, {extent - 1}] for "
                         f"{where}; got values from {indices.min()} to {indices.max()}")
    return np.where(indices < 0, indices + extent, indices)


def elements_index(op_type: str, shape: tuple, indices, axis: int) -> tuple:
    """The advanced index of GatherElements/ScatterElements: element ``i`` of ``indices``
    addresses data[i_0, ..., indices[i], ..., i_{r-1}] (``indices`` replaces the
    coordinate along ``axis``)."""
    indices = integer_indices(op_type, indices)
    rank = len(shape)
    if indices.ndim != rank:
        raise ShapeError(f"{op_type}: indices must have the rank of data ({rank}), got shape "
                         f"{indices.shape} for data of shape {tuple(shape)}")
    axis = normalize_axis(op_type, axis, rank)
    if any(i > d for k, (i, d) in enumerate(zip(indices.shape, shape)) if k != axis):
        raise ShapeError(f"{op_type}: indices of shape {indices.shape} exceed data of shape "
                         f"{tuple(shape)} outside axis {axis}")
    index = list(np.indices(indices.shape, sparse=True))
    index[axis] = wrap_indices(op_type, indices, shape[axis], f"axis {axis} of data of shape "
                                                             f"{tuple(shape)}")
    return tuple(index)


def nd_index(op_type: str, shape: tuple, indices, batch_dims: int = 0) -> tuple:
    """The advanced index of GatherND/ScatterND: the last dimension of ``indices`` holds
    (partial) coordinates into data after its first ``batch_dims`` dimensions, which
    ``indices`` shares. Addressing data[index] yields
    indices.shape[:-1] + shape[batch_dims + k:]."""
    indices = integer_indices(op_type, indices)
    rank, b = len(shape), int(batch_dims)
    if indices.ndim < 1:
        raise ShapeError(f"{op_type}: indices must have rank >= 1, got a scalar")
    k = indices.shape[-1]
    if not 0 <= b < min(rank, indices.ndim):
        raise ShapeError(f"{op_type}: batch_dims {b} must be smaller than the ranks of data "
                         f"({rank}) and indices ({indices.ndim})")
    if tuple(indices.shape[:b]) != tuple(shape[:b]):
        raise ShapeError(f"{op_type}: the first {b} (batch) dimensions of indices "
                         f"{indices.shape} and data {tuple(shape)} must be equal")
    if not 1 <= k <= rank - b:
        raise ShapeError(f"{op_type}: indices.shape[-1] = {k} must lie in [1, {rank - b}] "
                         f"(it exceeds the rank of data ({rank}) minus batch_dims ({b}) "
                         f"otherwise)")
    batch = [np.arange(d).reshape((1,) * i + (d,) + (1,) * (indices.ndim - 2 - i))
             for i, d in enumerate(shape[:b])]
    coordinates = [wrap_indices(op_type, indices[..., j], shape[b + j],
                                f"axis {b + j} of data of shape {tuple(shape)}")
                   for j in range(k)]
    return tuple(batch + coordinates)


def scatter(data: np.ndarray, index: tuple, updates: np.ndarray, reduction: str,
            op_type: str) -> np.ndarray:
    """A copy of ``data`` with ``updates`` written to data[index], combined by
    ``reduction`` with what is there ("none": replaced)."""
    if reduction not in REDUCTIONS:
        raise UnsupportedError(f"{op_type}: reduction {reduction!r} is not one of "
                               f"{list(REDUCTIONS)}")
    target_shape = np.broadcast_shapes(*(np.shape(i) for i in index)) + \
        data.shape[len(index):]
    if updates.shape != target_shape:
        raise ShapeError(f"{op_type}: updates must have shape {target_shape} for data of "
                         f"shape {data.shape} and these indices, got {updates.shape}")
    output = data.copy()
    if reduction == "none":
        output[index] = updates
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum,
                 "min": np.minimum}[reduction]
        ufunc.at(output, index, updates.astype(data.dtype, copy=False))
    return output


def scatter_backward(dY: np.ndarray, data: np.ndarray, index: tuple, updates: np.ndarray,
                     output: np.ndarray, reduction: str) -> tuple:
    """(d_data, d_updates) of :func:`scatter`. With "max"/"min" the gradient is shared
    equally by the values that tie for the result (as ReduceMax); with "mul" it is the
    product of the other factors, exact where some are zero."""
    if reduction == "none":
        d_data = dY.copy()
        d_data[index] = 0
        return d_data, dY[index].copy()
    if reduction == "add":
        return dY.copy(), dY[index].copy()
    if reduction in ("max", "min"):
        data_wins = data == output
        update_wins = updates == output[index]
        ties = data_wins.astype(data.dtype)
        np.add.at(ties, index, update_wins.astype(data.dtype))
        share = dY / np.maximum(ties, 1)
        return share * data_wins, share[index] * update_wins
    # mul: output = data * prod(updates at that position).
    zero = updates == 0
    product = np.ones_like(data)       # product of the non-zero updates per position
    np.multiply.at(product, index, np.where(zero, 1, updates))
    zeros = np.zeros(data.shape, np.int64)
    np.add.at(zeros, index, zero.astype(np.int64))
    d_data = dY * np.where(zeros == 0, product, 0)
    # d/du_j = data · (product of the other updates at u_j's position).
    product_j, zeros_j = product[index], zeros[index]
    safe = np.where(zero, 1, updates)
    others = np.where(zeros_j == 0, product_j / safe,
                      np.where(zero & (zeros_j == 1), product_j, 0))
    return d_data, (dY * data)[index] * others


class IndexedGather(ReferenceOp):
    """GatherElements and GatherND: output = data[index], with ``index(shape, indices)``
    one NumPy advanced index; the gradient scatter-adds, so that an element gathered
    twice receives both gradients."""

    def index(self, shape: tuple, indices) -> tuple:
        raise NotImplementedError

    def forward(self, data, indices):
        data = np.asarray(data)
        gathered = data[self.index(data.shape, indices)]
        # A copy where NumPy gave a view (an index that selects everything).
        return gathered.copy() if np.may_share_memory(gathered, data) else gathered

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, indices = np.asarray(fwd_inputs[0]), fwd_inputs[1]
        d_data = np.zeros_like(data)
        if grads[0] is not None:
            np.add.at(d_data, self.index(data.shape, indices), grads[0])
        return [d_data, None]


class IndexedScatter(ReferenceOp):
    """ScatterElements and ScatterND: a copy of data with updates written to
    data[``index(data, indices, updates)``], combined by the ``reduction`` attribute
    (see :func:`scatter` and :func:`scatter_backward`)."""

    def index(self, data, indices, updates) -> tuple:
        raise NotImplementedError

    def forward(self, data, indices, updates):
        data, updates = np.asarray(data), np.asarray(updates)
        return scatter(data, self.index(data, indices, updates), updates,
                       self.attr("reduction"), self.op_type)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, indices, updates = (np.asarray(x) for x in fwd_inputs)
        if not np.issubdtype(data.dtype, np.floating):
            return [None, None, None]
        dY = np.zeros_like(data) if grads[0] is None else np.asarray(grads[0])
        d_data, d_updates = scatter_backward(dY, data, self.index(data, indices, updates),
                                             updates, np.asarray(fwd_outputs[0]),
                                             self.attr("reduction"))
        return [d_data, None, d_updates.astype(updates.dtype, copy=False)]
