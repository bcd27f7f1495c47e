"""PyTorchVisitor: ReduceMean, ReduceSum and ReduceMax over the ``axes`` input.
https://onnx.ai/onnx/operators/onnx__ReduceSum.html
"""
from __future__ import annotations

import math

from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")

class ReduceOps:
    """``visit_<op>`` of the reductions, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use
    (``_emit``, ``_known``, ``_ints``, ``_shape``, ``_rank``, ``_dtype``, ``_fail``)."""

    def _reduce(self, op, fn):
        keepdims = bool(op.attributes.get("keepdims", 1))
        noop = bool(op.attributes.get("noop_with_empty_axes"))
        axes, runtime = self._axes(op)
        if runtime:
            def reduce_dynamic(x, a):
                dims = a.tolist()
                if not dims:
                    if noop:
                        return x
                    dims = list(range(x.dim()))
                return fn(x, dims, keepdims)
            self._emit(op, reduce_dynamic)
            return
        if not axes:
            if noop:
                self._emit(op, lambda x: x, op.inputs[:1])
            else:
                self._emit(op, lambda x: fn(x, tuple(range(x.dim())), keepdims),
                           op.inputs[:1])
            return
        axes = tuple(axes)
        self._emit(op, lambda x: fn(x, axes, keepdims), op.inputs[:1])

    def visit_reducemean(self, op, network):
        self._reduce(op, torch.mean)

    def visit_reducesum(self, op, network):
        self._reduce(op, torch.sum)

    def visit_reducemax(self, op, network):
        self._reduce(op, _amax)


def _amax(x, dims, keepdim):
    """torch.amax, and over an empty set (which torch.amax refuses) the identity of
    max, the type's lowest value (ONNX: https://onnx.ai/onnx/operators/onnx__ReduceMax.html)."""
    dims = tuple(d % x.dim() for d in dims) if x.dim() else ()
    if any(x.shape[d] == 0 for d in dims):
        shape = tuple(1 if i in dims else n for i, n in enumerate(x.shape)
                      if keepdim or i not in dims)
        lowest = (False if x.dtype == torch.bool else -math.inf if x.is_floating_point()
                  else torch.iinfo(x.dtype).min)
        return torch.full(shape, lowest, dtype=x.dtype, device=x.device)
    return torch.amax(x, dims, keepdim)
