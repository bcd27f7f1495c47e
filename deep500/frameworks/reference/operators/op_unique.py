"""Unique: the unique elements (or, with ``axis``, unique slices along it) of the input,
sorted (sorted=1) or in order of first occurrence, with the int64 indices of their first
occurrences, the inverse indices and the counts.
https://onnx.ai/onnx/operators/onnx__Unique.html

Not differentiable: which values are unique changes under arbitrarily small
perturbations of equal elements, so no gradient is returned.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import normalize_axis
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Unique")
class Unique(ReferenceOp):
    defaults = {"axis": None, "sorted": 1}

    def forward(self, X):
        X = np.asarray(X)
        axis = self.attr("axis")
        if axis is not None:
            axis = normalize_axis(self.op_type, axis, X.ndim)
        Y, first, inverse, counts = np.unique(X, return_index=True, return_inverse=True,
                                              return_counts=True, axis=axis)
        inverse = inverse.reshape(-1)
        if not self.attr("sorted"):
            # Renumber the sorted uniques in order of first occurrence.
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            Y = np.take(Y, order, axis=0 if axis is None else axis)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        return Y, *(np.asarray(a, np.int64) for a in (first, inverse, counts))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]
