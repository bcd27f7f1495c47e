"""The reduction family in PyTorch: Reduce* over the ``axes`` input (opset 18: empty axes
reduce everything unless noop_with_empty_axes), ArgMax/ArgMin, TopK and the cumulative
CumSum/CumProd. https://onnx.ai/onnx/operators/onnx__ReduceSum.html
"""
from __future__ import annotations

import math

from deep500.utils.errors import ShapeError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _reduced_shape(shape, dims, keepdim):
    return tuple(1 if i in dims else s for i, s in enumerate(shape)
                 if keepdim or i not in dims)


def _lowest(dtype):
    return False if dtype == torch.bool else (
        -math.inf if dtype.is_floating_point else torch.iinfo(dtype).min)


def _highest(dtype):
    return True if dtype == torch.bool else (
        math.inf if dtype.is_floating_point else torch.iinfo(dtype).max)


def _extremum(reduce, identity):
    """torch.amax or torch.amin, and over an empty set (which they refuse) the identity
    of max or min: the type's lowest or largest value
    (https://onnx.ai/onnx/operators/onnx__ReduceMax.html)."""
    def extremum(x, dims, keepdim):
        dims = tuple(d % x.dim() for d in dims) if x.dim() else ()
        if any(x.shape[d] == 0 for d in dims):
            return torch.full(_reduced_shape(x.shape, dims, keepdim), identity(x.dtype),
                              dtype=x.dtype, device=x.device)
        return reduce(x, dims, keepdim)
    return extremum


def _in_float(fn):
    """Integer inputs of L2 / LogSum / LogSumExp: computed in float64, cast back
    (truncating, as ONNX's reference does)."""
    def wrapped(x, dims, keepdim):
        if x.is_floating_point():
            return fn(x, dims, keepdim)
        return fn(x.double(), dims, keepdim).to(x.dtype)
    return wrapped


def _prod(x, dims, keepdim):
    for axis in sorted(dims, reverse=True):
        x = torch.prod(x, axis, keepdim=True)
    return x if keepdim else x.squeeze(tuple(dims)) if dims else x


def _prod(x, dims, keepdim):
    for axis in sorted(dims, reverse=True):
        x = torch.prod(x, axis, keepdim=True)
    return x if keepdim else x.squeeze(tuple(dims)) if dims else x


# name -> fn(x, dims, keepdim) over the given (non-empty) dims
_REDUCTIONS = {
    "mean": lambda x, d, k: torch.mean(x, d, keepdim=k),
    "sum": lambda x, d, k: torch.sum(x, d, keepdim=k),
    "max": _extremum(torch.amax, _lowest),
    "min": _extremum(torch.amin, _highest),
    "l1": lambda x, d, k: x.abs().sum(d, keepdim=k),
    "l2": _in_float(lambda x, d, k: torch.linalg.vector_norm(x, 2, d, keepdim=k)),
    "logsum": _in_float(lambda x, d, k: torch.log(x.sum(d, keepdim=k))),
    "logsumexp": _in_float(lambda x, d, k: torch.logsumexp(x, d, keepdim=k)),
    "prod": _prod,
    "sumsquare": lambda x, d, k: (x * x).sum(d, keepdim=k),
}
# What each reduction leaves of a single element: the result of noop_with_empty_axes=1
# with no axes, where (as in ONNX's function bodies) the elementwise part still applies.
_SINGLE = {
    "mean": lambda x: x, "sum": lambda x: x, "max": lambda x: x, "min": lambda x: x,
    "l1": torch.abs, "l2": torch.abs, "logsum": torch.log, "logsumexp": lambda x: x,
    "prod": lambda x: x, "sumsquare": lambda x: x * x,
}
# The reductions of exported networks (LayerNorm statistics, pooling heads): with fixed
# axes they run as the one torch call, nothing normalised per run.
_DIRECT = ("mean", "sum", "max")


def _reduce_fn(reduction, keepdim, noop):
    """``fn(x, axes)`` of ONNX Reduce<reduction>: no axes (None or empty) reduce every
    axis, or with ``noop`` none."""
    compute = _REDUCTIONS[reduction]

    def reduce(x, axes=None):
        dims = [] if axes is None else [int(a) for a in axes]
        if not dims:
            if noop:
                return _SINGLE[reduction](x)
            dims = list(range(x.dim()))
        dims = tuple(sorted({a % x.dim() for a in dims})) if x.dim() else ()
        if not dims:  # a scalar
            return _SINGLE[reduction](x)
        return compute(x, dims, keepdim)
    return reduce


def _cumulative(step, identity, axis, exclusive, reverse):
    """CumSum/CumProd: https://onnx.ai/onnx/operators/onnx__CumSum.html"""
    def cumulate(x):
        if reverse:
            x = x.flip(axis)
        y = step(x, axis)
        if exclusive:
            first = torch.full_like(x.narrow(axis, 0, 1), identity)
            y = torch.cat([first, y.narrow(axis, 0, x.shape[axis] - 1)], axis)
        return y.flip(axis) if reverse else y
    return cumulate


def _reducing(reduction: str):
    """The ``visit_<op>`` of ONNX Reduce<reduction>."""
    def visit(self, op, network):
        self._reduction(op, reduction)
    return visit


class ReductionOps:
    """``visit_<op>`` of the reduction family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def _reduction(self, op, reduction):
        keepdim = bool(op.attributes.get("keepdims", 1))
        noop = bool(op.attributes.get("noop_with_empty_axes"))
        reduce = _reduce_fn(reduction, keepdim, noop)
        axes, runtime = self._axes(op)
        if runtime:
            self._emit(op, lambda x, a: reduce(x, a.tolist()))
        elif axes and reduction in _DIRECT:
            compute, axes = _REDUCTIONS[reduction], tuple(axes)
            self._emit(op, lambda x: compute(x, axes, keepdim), op.inputs[:1])
        else:
            self._emit(op, lambda x: reduce(x, axes), op.inputs[:1])

    visit_reducemean = _reducing("mean")
    visit_reducesum = _reducing("sum")
    visit_reducemax = _reducing("max")
    visit_reducemin = _reducing("min")
    visit_reducel1 = _reducing("l1")
    visit_reducel2 = _reducing("l2")
    visit_reducelogsum = _reducing("logsum")
    visit_reducelogsumexp = _reducing("logsumexp")
    visit_reduceprod = _reducing("prod")
    visit_reducesumsquare = _reducing("sumsquare")

    def _arg(self, op, fn):
        """ArgMax/ArgMin: https://onnx.ai/onnx/operators/onnx__ArgMax.html"""
        axis = op.attributes["axis"]
        keepdim = bool(op.attributes["keepdims"])
        last = bool(op.attributes.get("select_last_index"))

        def arg(x):
            if not last:
                return fn(x, axis, keepdim)
            flipped = fn(x.flip(axis), axis, keepdim)  # torch picks the first extremum
            return x.shape[axis] - 1 - flipped
        self._emit(op, arg)

    def visit_argmax(self, op, network):
        self._arg(op, torch.argmax)

    def visit_argmin(self, op, network):
        self._arg(op, torch.argmin)

    def visit_topk(self, op, network):
        """Ties keep the lower index first (a stable sort).
        https://onnx.ai/onnx/operators/onnx__TopK.html"""
        axis = op.attributes["axis"]
        largest = bool(op.attributes["largest"])

        def topk(x, k):
            count = int(k.reshape(-1)[0])
            if not 0 <= count <= x.shape[axis]:
                raise ShapeError(f"TopK: K={count} is outside [0, {x.shape[axis]}] "
                                 f"(the size of axis {axis})")
            values, indices = torch.sort(x, dim=axis, descending=largest, stable=True)
            return values.narrow(axis, 0, count), indices.narrow(axis, 0, count)
        self._emit(op, topk)

    def _cumulate(self, op, step, identity):
        exclusive = bool(op.attributes["exclusive"])
        reverse = bool(op.attributes["reverse"])
        axis = self._ints(op.inputs[1])
        if axis is not None:
            self._emit(op, _cumulative(step, identity, axis[0], exclusive, reverse),
                       op.inputs[:1])
        else:
            self._emit(op, lambda x, a: _cumulative(step, identity, int(a.reshape(-1)[0]),
                                                    exclusive, reverse)(x))

    def visit_cumsum(self, op, network):
        self._cumulate(op, lambda x, axis: torch.cumsum(x, axis, dtype=x.dtype), 0)

    def visit_cumprod(self, op, network):
        self._cumulate(op, lambda x, axis: torch.cumprod(x, axis, dtype=x.dtype), 1)


__all__ = ["ReductionOps"]
