"""PyTorchVisitor methods for the elementwise, cast, logical, bitwise, activation,
reduction and indexing operators of the ONNX operator set (issue 19), with the
quantization (QuantizeLinear, DequantizeLinear, QLinearMatMul, ...), window, DFT/STFT
and NonMaxSuppression operators, mixed into
:class:`deep500.frameworks.pytorch.visitor.PyTorchVisitor`: each ``visit_<op>`` uses the
visitor's own helpers (``_emit``, ``_known``, ``_dtype``, ``_rank``, ``_fail``) and
follows https://onnx.ai/onnx/operators/onnx__<Op>.html (newest opset). Every graph
path is built from differentiable torch functions, so gradients flow through autograd.
"""
from __future__ import annotations

import functools
import math

from deep500.frameworks.pytorch._torch_common import torch_dtype
from deep500.utils.errors import ShapeError, UnsupportedError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

# Unsigned types that PyTorch stores but has few CPU kernels for (remainder, shifts,
# maximum): computed in int64, which holds every uint16/uint32 value exactly.
_NARROW_UNSIGNED = (torch.uint16, torch.uint32)
_INT64_MAX = (1 << 63) - 1


def _unsigned_safe(fn):
    """``fn(a, b)`` for uint16/32 inputs computed in int64 and cast back; uint64 values
    must fit int64 (checked, since the bits would otherwise be read as negative)."""
    def wrapped(a, b):
        if a.dtype in _NARROW_UNSIGNED:
            return fn(a.long(), b.long()).to(a.dtype)
        if a.dtype == torch.uint64:
            wide_a, wide_b = a.long(), b.long()
            if bool((wide_a < 0).any()) or bool((wide_b < 0).any()):
                raise UnsupportedError("The PyTorch executor computes this uint64 operator "
                                       "in int64: values of 2**63 and above are not "
                                       "supported; cast to a float type first")
            return fn(wide_a, wide_b).to(a.dtype)
        return fn(a, b)
    return wrapped


# 8-bit float types (https://onnx.ai/onnx/technical/float8.html) that PyTorch has.
_FLOAT8 = tuple(getattr(torch, name) for name in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
    if hasattr(torch, name))


def cast(x, dtype, saturate: bool = True):
    """ONNX Cast of ``x`` to ``dtype``. To 8-bit floats, values beyond the largest
    finite one become it (saturate, the default) or else NaN (the FN/FNUZ types) or
    ±inf (E5M2), after rounding to nearest even: PyTorch's own conversion does all of
    this but saturates E4M3FN always, so that case is written out.
    https://onnx.ai/onnx/operators/onnx__Cast.html"""
    if dtype not in _FLOAT8 or not x.is_floating_point():
        return x.to(dtype)
    big = torch.finfo(dtype).max
    if saturate:
        return torch.clamp(x, -big, big).to(dtype)
    if dtype == torch.float8_e4m3fn:
        # beyond max + half its ulp (3 mantissa bits) rounds past the largest value
        limit = big + 2.0 ** (math.floor(math.log2(big)) - 4)
        return torch.where(x.abs() > limit, math.nan, x.float()).to(dtype)
    return x.to(dtype)


def _ordered(x):
    """Unsigned tensors as signed ones with the same order (PyTorch has no uint16/32/64
    comparison kernels): uint16/32 widen to int64; uint64 flips its top bit and is read
    as int64."""
    if x.dtype in _NARROW_UNSIGNED:
        return x.long()
    if x.dtype == torch.uint64:
        return x.view(torch.int64) ^ (-1 << 63)
    return x


def _compare(fn):
    return lambda a, b: fn(_ordered(a), _ordered(b))


def _bitwise_not(x):
    if x.dtype in _NARROW_UNSIGNED:
        return torch.bitwise_not(x.long()).to(x.dtype)
    if x.dtype == torch.uint64:
        return torch.bitwise_not(x.view(torch.int64)).view(torch.uint64)
    return torch.bitwise_not(x)


def _min_of_nothing(dtype):
    """ReduceMin over an empty set: the identity of min, the type's largest value."""
    if dtype == torch.bool:
        return True
    return math.inf if dtype.is_floating_point else torch.iinfo(dtype).max


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


_REDUCTIONS = {
    "l1": lambda x, d, k: x.abs().sum(d, keepdim=k),
    "l2": _in_float(lambda x, d, k: torch.linalg.vector_norm(x, 2, d, keepdim=k)),
    "logsum": _in_float(lambda x, d, k: torch.log(x.sum(d, keepdim=k))),
    "logsumexp": _in_float(lambda x, d, k: torch.logsumexp(x, d, keepdim=k)),
    "min": lambda x, d, k: torch.amin(x, d, keepdim=k),
    "prod": _prod,
    "sumsquare": lambda x, d, k: (x * x).sum(d, keepdim=k),
}


# What each reduction leaves of a single element: the result of noop_with_empty_axes=1
# with no axes, where (as in ONNX's function bodies) the elementwise part still applies.
_SINGLE = {
    "l1": torch.abs, "l2": torch.abs, "logsum": torch.log, "logsumexp": lambda x: x,
    "min": lambda x: x, "prod": lambda x: x, "sumsquare": lambda x: x * x,
}


def _reduced_shape(shape, dims, keepdim):
    return tuple(1 if i in dims else s for i, s in enumerate(shape)
                 if keepdim or i not in dims)


def _reduce_fn(reduction, keepdim, noop):
    """``fn(x, axes)`` of ONNX Reduce<reduction> (opset 18: axes an input, empty axes
    reduce everything unless noop_with_empty_axes)."""
    compute = _REDUCTIONS[reduction]

    def reduce(x, axes=None):
        dims = [] if axes is None else [int(a) for a in axes]
        if not dims:
            if noop:
                return _SINGLE[reduction](x)
            dims = list(range(x.dim()))
        dims = tuple(sorted({a % x.dim() for a in dims})) if x.dim() else ()
        if reduction == "min" and any(x.shape[a] == 0 for a in dims):
            # (torch.amin refuses empty sets; the other reductions give their identity)
            return torch.full(_reduced_shape(x.shape, dims, keepdim),
                              _min_of_nothing(x.dtype), dtype=x.dtype, device=x.device)
        if not dims:  # a scalar
            return _SINGLE[reduction](x)
        return compute(x, dims, keepdim)
    return reduce


def _normalized(index, size):
    """ONNX indices may be negative (counted from the end)."""
    return torch.where(index < 0, index + size, index).long()


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


def _broadcast_quantization(value, shape, axis, block):
    """A scale or zero point broadcastable to the quantized tensor: one value, one per
    index of ``axis``, or (``block`` > 0) one per block of ``block`` indices along it.
    https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html"""
    if value.numel() == 1:
        return value.reshape(())
    axis %= len(shape)
    if not block:
        dims = [1] * len(shape)
        dims[axis] = value.numel()
        return value.reshape(dims)
    return value.repeat_interleave(block, axis).narrow(axis, 0, shape[axis])


def _saturate_integer(values, dtype):
    info = torch.iinfo(dtype)
    return values.clamp(info.min, info.max).to(dtype)


def _window(kind, size, periodic, dtype):
    """Hann, Hamming and Blackman windows of ``size`` samples (periodic: the
    denominator is N, else N - 1), computed in float64.
    https://onnx.ai/onnx/operators/onnx__HannWindow.html"""
    count = int(size.reshape(-1)[0])
    n = torch.arange(count, dtype=torch.float64, device=size.device)
    phase = 2 * math.pi * n / (count if periodic else max(count - 1, 1))
    if kind == "hann":
        window = 0.5 - 0.5 * torch.cos(phase)
    elif kind == "hamming":
        window = 25 / 46 - 21 / 46 * torch.cos(phase)
    else:
        window = 0.42 - 0.5 * torch.cos(phase) + 0.08 * torch.cos(2 * phase)
    return window.to(dtype)


def _corners(boxes, center_point_box):
    """(y_min, x_min, y_max, x_max) of [y1, x1, y2, x2] boxes (either diagonal) or
    of [x_center, y_center, width, height] boxes."""
    if center_point_box:
        x, y, w, h = boxes.unbind(-1)
        return y - h / 2, x - w / 2, y + h / 2, x + w / 2
    y1, x1, y2, x2 = boxes.unbind(-1)
    return (torch.minimum(y1, y2), torch.minimum(x1, x2), torch.maximum(y1, y2),
            torch.maximum(x1, x2))


def _overlaps(boxes, center_point_box):
    """Intersection over union of every pair of ``boxes`` [N, 4]; 0 where a box or the
    intersection is empty."""
    y0, x0, y1, x1 = _corners(boxes, center_point_box)
    height = (torch.minimum(y1[:, None], y1[None]) - torch.maximum(y0[:, None], y0[None]))
    width = (torch.minimum(x1[:, None], x1[None]) - torch.maximum(x0[:, None], x0[None]))
    inter = width.clamp(min=0) * height.clamp(min=0)
    area = (x1 - x0) * (y1 - y0)
    union = area[:, None] + area[None] - inter
    valid = (inter > 0) & (area[:, None] > 0) & (area[None] > 0) & (union > 0)
    return torch.where(valid, inter / torch.where(valid, union, 1), 0)


class TensorOps:
    """Mixin of ``visit_<op>`` methods (see the module docstring). Methods that
    the visitor class defines itself take precedence over these."""

    def _const_ints(self, name):
        value = self._known(name)
        return None if value is None else [int(v) for v in value.reshape(-1).tolist()]

    # -- elementwise math ---------------------------------------------------------------
    def visit_sin(self, op, network):
        self._emit(op, torch.sin)

    def visit_cos(self, op, network):
        self._emit(op, torch.cos)

    def visit_tan(self, op, network):
        self._emit(op, torch.tan)

    def visit_asin(self, op, network):
        self._emit(op, torch.asin)

    def visit_acos(self, op, network):
        self._emit(op, torch.acos)

    def visit_atan(self, op, network):
        self._emit(op, torch.atan)

    def visit_sinh(self, op, network):
        self._emit(op, torch.sinh)

    def visit_cosh(self, op, network):
        self._emit(op, torch.cosh)

    def visit_asinh(self, op, network):
        self._emit(op, torch.asinh)

    def visit_acosh(self, op, network):
        self._emit(op, torch.acosh)

    def visit_atanh(self, op, network):
        self._emit(op, torch.atanh)

    def visit_sign(self, op, network):
        self._emit(op, torch.sign)

    def visit_round(self, op, network):
        """Halves to even, as torch.round.
        https://onnx.ai/onnx/operators/onnx__Round.html"""
        self._emit(op, torch.round)

    def visit_isnan(self, op, network):
        self._emit(op, torch.isnan)

    def visit_isinf(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__IsInf.html"""
        positive = bool(op.attributes.get("detect_positive", 1))
        negative = bool(op.attributes.get("detect_negative", 1))
        if positive and negative:
            self._emit(op, torch.isinf)
        elif positive:
            self._emit(op, torch.isposinf)
        elif negative:
            self._emit(op, torch.isneginf)
        else:
            self._emit(op, lambda x: torch.zeros_like(x, dtype=torch.bool))

    def visit_mod(self, op, network):
        """fmod=1: C fmod (sign of the dividend); fmod=0: sign of the divisor.
        https://onnx.ai/onnx/operators/onnx__Mod.html"""
        fn = torch.fmod if op.attributes.get("fmod") else torch.remainder
        self._emit(op, _unsigned_safe(fn))

    def visit_mean(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Mean.html"""
        count = len(op.inputs)
        self._emit(op, lambda *xs: functools.reduce(torch.add, xs) / count)

    def visit_det(self, op, network):
        self._emit(op, torch.linalg.det)

    # -- casts ------------------------------------------------------------------------
    def visit_castlike(self, op, network):
        """Cast to the element type of the second input.
        https://onnx.ai/onnx/operators/onnx__CastLike.html"""
        saturate = bool(op.attributes.get("saturate", 1))
        try:
            target = self._dtype(op.inputs[1])
        except UnsupportedError as error:
            raise self._fail(op, f"the target type has no PyTorch tensor type ({error}); "
                                 f"run this model on the reference executor, which "
                                 f"implements it") from None
        if target is not None:
            self._emit(op, lambda x: cast(x, target, saturate), op.inputs[:1])
        else:
            self._emit(op, lambda x, like: cast(x, like.dtype, saturate))

    def visit_bitcast(self, op, network):
        """The same bits read as type ``to`` (of the same width), shape unchanged.
        https://onnx.ai/onnx/operators/onnx__BitCast.html"""
        target = torch_dtype(op.attributes["to"])

        def bit_cast(x):
            if x.element_size() != torch.empty((), dtype=target).element_size():
                raise ShapeError(f"BitCast: {x.dtype} and {target} differ in width; "
                                 f"BitCast needs types of the same number of bits")
            return x.view(target)
        self._emit(op, bit_cast)

    # -- logical and bitwise -------------------------------------------------------------
    def visit_and(self, op, network):
        self._emit(op, torch.logical_and)

    def visit_or(self, op, network):
        self._emit(op, torch.logical_or)

    def visit_xor(self, op, network):
        self._emit(op, torch.logical_xor)

    def visit_lessorequal(self, op, network):
        self._emit(op, _compare(torch.le))

    def visit_greaterorequal(self, op, network):
        self._emit(op, _compare(torch.ge))

    def visit_bitwiseand(self, op, network):
        self._emit(op, torch.bitwise_and)

    def visit_bitwiseor(self, op, network):
        self._emit(op, torch.bitwise_or)

    def visit_bitwisexor(self, op, network):
        self._emit(op, torch.bitwise_xor)

    def visit_bitwisenot(self, op, network):
        self._emit(op, _bitwise_not)

    def visit_bitshift(self, op, network):
        """Logical shifts of unsigned integers.
        https://onnx.ai/onnx/operators/onnx__BitShift.html"""
        direction = op.attributes["direction"]
        if direction not in ("LEFT", "RIGHT"):
            raise self._fail(op, f"direction must be 'LEFT' or 'RIGHT', not "
                                 f"{direction!r}", ShapeError)
        left = direction == "LEFT"

        def shift(x, s):
            if x.dtype in _NARROW_UNSIGNED:
                wide = x.long()
                shifted = wide << s.long() if left else wide >> s.long()
                return shifted.to(x.dtype)
            if x.dtype == torch.uint64:  # the same bits in int64: shift logically
                bits, count = x.view(torch.int64), s.view(torch.int64)
                if left:
                    return (bits << count).view(torch.uint64)
                logical = ((bits >> 1) & _INT64_MAX) >> (count - 1).clamp(min=0)
                return torch.where(count == 0, bits, logical).view(torch.uint64)
            return x << s if left else x >> s
        self._emit(op, shift)

    # -- activations -----------------------------------------------------------------
    def visit_elu(self, op, network):
        alpha = float(op.attributes["alpha"])
        self._emit(op, lambda x: F.elu(x, alpha))

    def visit_selu(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Selu.html"""
        alpha, gamma = float(op.attributes["alpha"]), float(op.attributes["gamma"])
        self._emit(op, lambda x: gamma * torch.where(x > 0, x, alpha * torch.expm1(
            torch.clamp(x, max=0))))

    def visit_celu(self, op, network):
        alpha = float(op.attributes["alpha"])
        self._emit(op, lambda x: F.celu(x, alpha))

    def visit_hardsigmoid(self, op, network):
        alpha, beta = float(op.attributes["alpha"]), float(op.attributes["beta"])
        self._emit(op, lambda x: torch.clamp(alpha * x + beta, 0, 1))

    def visit_hardswish(self, op, network):
        """x·max(0, min(1, x/6 + 1/2)).
        https://onnx.ai/onnx/operators/onnx__HardSwish.html"""
        self._emit(op, F.hardswish)

    def visit_softplus(self, op, network):
        """log(1 + exp(x)), written stably as max(x, 0) + log1p(exp(-|x|))."""
        self._emit(op, lambda x: torch.clamp(x, min=0) + torch.log1p(torch.exp(-x.abs())))

    def visit_softsign(self, op, network):
        self._emit(op, lambda x: x / (1 + x.abs()))

    def visit_thresholdedrelu(self, op, network):
        alpha = float(op.attributes["alpha"])
        self._emit(op, lambda x: torch.where(x > alpha, x, torch.zeros_like(x)))

    def visit_shrink(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Shrink.html"""
        bias, lambd = float(op.attributes["bias"]), float(op.attributes["lambd"])

        def shrink(x):
            zero = torch.zeros_like(x)
            if x.is_floating_point():
                return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias,
                                                                      zero))
            low = (x.double() + bias).to(x.dtype)
            high = (x.double() - bias).to(x.dtype)
            return torch.where(x < -lambd, low, torch.where(x > lambd, high, zero))
        self._emit(op, shrink)

    def visit_prelu(self, op, network):
        self._emit(op, lambda x, slope: torch.where(x < 0, x * slope, x))

    def visit_mish(self, op, network):
        self._emit(op, F.mish)

    def visit_swish(self, op, network):
        """x·sigmoid(alpha·x): https://onnx.ai/onnx/operators/onnx__Swish.html"""
        alpha = op.attributes.get("alpha")
        alpha = 1.0 if alpha is None else float(alpha)
        self._emit(op, lambda x: x * torch.sigmoid(alpha * x))

    def visit_swiglu(self, op, network):
        """Swish_alpha(A)·B: https://onnx.ai/onnx/operators/onnx__SwiGLU.html"""
        alpha = float(op.attributes["alpha"])
        self._emit(op, lambda a, b: a * torch.sigmoid(alpha * a) * b)

    def visit_hardmax(self, op, network):
        """1 at the first maximum along ``axis``, 0 elsewhere.
        https://onnx.ai/onnx/operators/onnx__Hardmax.html"""
        axis = op.attributes["axis"]

        def hardmax(x):
            index = x.argmax(axis, keepdim=True)
            return torch.zeros_like(x).scatter(axis, index, 1)
        self._emit(op, hardmax)

    # -- reductions --------------------------------------------------------------------
    def _reduction(self, op, reduction):
        keepdim = bool(op.attributes.get("keepdims", 1))
        noop = bool(op.attributes.get("noop_with_empty_axes"))
        fn = _reduce_fn(reduction, keepdim, noop)
        if len(op.inputs) > 1 and op.inputs[1]:
            axes = self._const_ints(op.inputs[1])
            if axes is None:
                self._emit(op, lambda x, a: fn(x, a.tolist()))
            else:
                self._emit(op, lambda x: fn(x, axes), op.inputs[:1])
        else:
            self._emit(op, fn, op.inputs[:1])

    def visit_reducel1(self, op, network):
        self._reduction(op, "l1")

    def visit_reducel2(self, op, network):
        self._reduction(op, "l2")

    def visit_reducelogsum(self, op, network):
        self._reduction(op, "logsum")

    def visit_reducelogsumexp(self, op, network):
        self._reduction(op, "logsumexp")

    def visit_reducemin(self, op, network):
        self._reduction(op, "min")

    def visit_reduceprod(self, op, network):
        self._reduction(op, "prod")

    def visit_reducesumsquare(self, op, network):
        self._reduction(op, "sumsquare")

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

    # -- cumulative ----------------------------------------------------------------------
    def _cumulate(self, op, step, identity):
        exclusive = bool(op.attributes["exclusive"])
        reverse = bool(op.attributes["reverse"])
        axis = self._const_ints(op.inputs[1])
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

    # -- indexing ------------------------------------------------------------------------
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
            raise self._fail(op, f"reduction {reduction!r} is not one of none, add, mul, "
                                 f"max, min", ShapeError)

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
            raise self._fail(op, f"reduction {reduction!r} is not one of none, add, mul, "
                                 f"max, min", ShapeError)

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

    # -- shapes -----------------------------------------------------------------------
    def visit_trilu(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Trilu.html"""
        fn = torch.triu if op.attributes.get("upper", 1) else torch.tril
        if len(op.inputs) > 1 and op.inputs[1]:
            k = self._const_ints(op.inputs[1])
            if k is None:
                self._emit(op, lambda x, k: fn(x, int(k.reshape(-1)[0])))
                return
            diagonal = k[0]
            self._emit(op, lambda x: fn(x, diagonal), op.inputs[:1])
        else:
            self._emit(op, fn, op.inputs[:1])

    def visit_tile(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Tile.html"""
        repeats = self._const_ints(op.inputs[1])
        if repeats is None:
            self._emit(op, lambda x, r: x.repeat(tuple(int(v) for v in r.tolist())))
        else:
            repeats = tuple(repeats)
            self._emit(op, lambda x: x.repeat(repeats), op.inputs[:1])

    def visit_einsum(self, op, network):
        equation = op.attributes["equation"].replace(" ", "")
        self._emit(op, lambda *xs: torch.einsum(equation, *xs))

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

    def visit_eyelike(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__EyeLike.html"""
        dtype = op.attributes.get("dtype")
        dtype = None if dtype is None else torch_dtype(dtype)
        k = int(op.attributes.get("k") or 0)

        def eye_like(x):
            if x.dim() != 2:
                raise ShapeError(f"EyeLike takes a 2-D input, not shape {tuple(x.shape)}")
            rows = torch.arange(x.shape[0], device=x.device).view(-1, 1)
            cols = torch.arange(x.shape[1], device=x.device).view(1, -1)
            return (cols - rows == k).to(x.dtype if dtype is None else dtype)
        self._emit(op, eye_like)

    def visit_depthtospace(self, op, network):
        """DCR (depth, column, row) or CRD ordering of the moved channels.
        https://onnx.ai/onnx/operators/onnx__DepthToSpace.html"""
        block = op.attributes["blocksize"]
        crd = (op.attributes.get("mode") or "DCR") == "CRD"

        def depth_to_space(x):
            n, c, h, w = x.shape
            channels = c // (block * block)
            if crd:
                y = x.reshape(n, channels, block, block, h, w).permute(0, 1, 4, 2, 5, 3)
            else:
                y = x.reshape(n, block, block, channels, h, w).permute(0, 3, 4, 1, 5, 2)
            return y.reshape(n, channels, h * block, w * block)
        self._emit(op, depth_to_space)

    def visit_spacetodepth(self, op, network):
        """The inverse of DepthToSpace in the same mode (DCR or CRD).
        https://onnx.ai/onnx/operators/onnx__SpaceToDepth.html"""
        block = op.attributes["blocksize"]
        order = ((0, 1, 3, 5, 2, 4) if (op.attributes.get("mode") or "DCR") == "CRD"
                 else (0, 3, 5, 1, 2, 4))

        def space_to_depth(x):
            n, c, h, w = x.shape
            y = x.reshape(n, c, h // block, block, w // block, block)
            return y.permute(order).reshape(n, c * block * block, h // block,
                                                       w // block)
        self._emit(op, space_to_depth)

    # -- quantization ---------------------------------------------------------------
    def _quantized_type(self, op, name, given):
        """The element type of a quantized tensor: that of ``name`` (a zero point) if
        present, else the output_dtype attribute ``given``, else uint8."""
        try:
            dtype = self._dtype(name) if name else None
            if dtype is None and given:
                dtype = torch_dtype(given)
        except UnsupportedError as error:
            raise self._fail(op, f"the quantized type has no PyTorch tensor type "
                                 f"({error})") from None
        return dtype

    def visit_quantizelinear(self, op, network):
        """y = saturate(round(x / scale) + zero_point), rounding halves to even; scale
        and zero point per tensor, per axis or per block.
        https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html"""
        a = op.attributes
        axis, block = a.get("axis", 1), a.get("block_size") or 0
        saturate = bool(a.get("saturate", 1))
        names = list(op.inputs) + [""]
        static = self._quantized_type(op, names[2], a.get("output_dtype"))
        precision = a.get("precision")
        precision = torch_dtype(precision) if precision else None

        def quantize(x, scale, zero_point=None):
            dtype = static or (zero_point.dtype if zero_point is not None else torch.uint8)
            scale = _broadcast_quantization(scale, x.shape, axis, block)
            if precision is not None:
                x, scale = x.to(precision), scale.to(precision)
            scaled = x / scale
            if dtype.is_floating_point:
                return cast(scaled, dtype, saturate)
            rounded = torch.round(scaled).long()
            if zero_point is not None:
                rounded = rounded + _broadcast_quantization(zero_point.long(), x.shape,
                                                            axis, block)
            return _saturate_integer(rounded, dtype)
        self._emit(op, quantize)

    def visit_dequantizelinear(self, op, network):
        """y = (x - zero_point)·scale in float32, then the scale's type (or output_dtype).
        https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html"""
        a = op.attributes
        axis, block = a.get("axis", 1), a.get("block_size") or 0
        given = a.get("output_dtype")
        output = torch_dtype(given) if given else None

        def dequantize(x, scale, zero_point=None):
            shifted = x.float()
            if zero_point is not None:
                shifted = shifted - _broadcast_quantization(zero_point.float(), x.shape,
                                                            axis, block)
            y = shifted * _broadcast_quantization(scale, x.shape, axis, block)
            return y.to(output or scale.dtype)
        self._emit(op, dequantize)

    def visit_dynamicquantizelinear(self, op, network):
        """uint8 quantization with the scale and zero point that map [min(x, 0),
        max(x, 0)] onto [0, 255].
        https://onnx.ai/onnx/operators/onnx__DynamicQuantizeLinear.html"""
        def dynamic_quantize(x):
            high = torch.clamp(x.max().float(), min=0)
            low = torch.clamp(x.min().float(), max=0)
            span = torch.where(high == low, torch.ones_like(high), high - low)
            scale = span / 255
            zero = torch.round(torch.clamp(-low / scale, 0, 255))
            y = torch.clamp(torch.round(x / scale) + zero, 0, 255).to(torch.uint8)
            return y, scale.to(x.dtype), zero.to(torch.uint8)
        self._emit(op, dynamic_quantize)

    def visit_matmulinteger(self, op, network):
        """(A - a_zero_point)·(B - b_zero_point) in int32; a 1-D a_zero_point is per row.
        https://onnx.ai/onnx/operators/onnx__MatMulInteger.html"""
        def matmul_integer(a, b, a_zero=None, b_zero=None):
            a, b = a.long(), b.long()
            if a_zero is not None:
                a = a - (a_zero.long().view(-1, 1) if a_zero.numel() > 1 else
                         a_zero.long().reshape(()))
            if b_zero is not None:
                b = b - b_zero.long()
            return torch.matmul(a, b).to(torch.int32)
        self._emit(op, matmul_integer)

    def visit_qlinearmatmul(self, op, network):
        """Integer product of the shifted inputs, rescaled by a_scale·b_scale/y_scale,
        rounded (halves to even), shifted by y_zero_point and saturated.
        https://onnx.ai/onnx/operators/onnx__QLinearMatMul.html"""
        def qlinear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero=None):
            product = torch.matmul(a.long() - a_zero.long(), b.long() - b_zero.long())
            y = product.double() * (a_scale * b_scale / y_scale).double()
            if y_zero is not None:
                y = y + y_zero.double()
            dtype = a.dtype if y_zero is None else y_zero.dtype
            return _saturate_integer(torch.round(y), dtype)
        self._emit(op, qlinear_matmul)

    # -- windows ----------------------------------------------------------------------
    def _window(self, op, kind):
        periodic = bool(op.attributes.get("periodic", 1))
        dtype = torch_dtype(op.attributes.get("output_datatype") or 1)
        self._emit(op, lambda size: _window(kind, size, periodic, dtype))

    def visit_hannwindow(self, op, network):
        self._window(op, "hann")

    def visit_hammingwindow(self, op, network):
        self._window(op, "hamming")

    def visit_blackmanwindow(self, op, network):
        self._window(op, "blackman")

    # -- signal processing and detection ----------------------------------------------
    def visit_dft(self, op, network):
        """Discrete Fourier transform along ``axis`` of a signal whose last dimension
        holds (real) or (real, imaginary); onesided keeps the n//2 + 1 non-redundant
        frequencies (inverse + onesided: a real signal from them).
        https://onnx.ai/onnx/operators/onnx__DFT.html"""
        inverse = bool(op.attributes.get("inverse"))
        onesided = bool(op.attributes.get("onesided"))
        default = op.attributes.get("axis", -2)  # an attribute before opset 20

        def dft(x, length=None, axis_input=None):
            axis = default if axis_input is None else int(axis_input.reshape(-1)[0])
            dim = axis % x.dim()
            if dim == x.dim() - 1:
                raise ShapeError(f"DFT: axis {axis} is the real/imaginary dimension of "
                                 f"an input of shape {tuple(x.shape)}")
            signal = x[..., 0] if x.shape[-1] == 1 else torch.complex(x[..., 0], x[..., 1])
            n = None if length is None else int(length.reshape(-1)[0])
            if inverse and onesided:
                return torch.fft.irfft(signal, n, dim=dim).unsqueeze(-1)
            if inverse:
                y = torch.fft.ifft(signal, n, dim=dim)
            elif onesided and not signal.is_complex():
                y = torch.fft.rfft(signal, n, dim=dim)
            else:
                y = torch.fft.fft(signal, n, dim=dim)
                if onesided:
                    y = y.narrow(dim, 0, y.shape[dim] // 2 + 1)
            return torch.stack([y.real, y.imag], -1)
        self._emit(op, dft)

    def visit_stft(self, op, network):
        """DFTs of the frames of frame_length samples every frame_step samples, each
        multiplied by the window; computed in float64, returned in the signal's type.
        https://onnx.ai/onnx/operators/onnx__STFT.html"""
        onesided = bool(op.attributes.get("onesided", 1))

        def stft(signal, frame_step, window=None, frame_length=None):
            x = signal.double()
            x = x[..., 0] if x.shape[-1] == 1 else torch.complex(x[..., 0], x[..., 1])
            if frame_length is not None:
                length = int(frame_length.reshape(-1)[0])
            else:
                length = x.shape[1] if window is None else window.shape[0]
            frames = x.unfold(1, length, int(frame_step.reshape(-1)[0]))
            if window is not None:
                frames = frames * window.double()
            if onesided and not frames.is_complex():
                y = torch.fft.rfft(frames, dim=-1)
            else:
                y = torch.fft.fft(frames, dim=-1)
                if onesided:
                    y = y[..., :length // 2 + 1]
            return torch.stack([y.real, y.imag], -1).to(signal.dtype)
        self._emit(op, stft)

    def visit_nonmaxsuppression(self, op, network):
        """Greedy per batch and class: boxes by descending score (ties: lower index
        first) above score_threshold, each kept unless its IoU with a kept box exceeds
        iou_threshold, at most max_output_boxes_per_class; [batch, class, box] rows.
        https://onnx.ai/onnx/operators/onnx__NonMaxSuppression.html"""
        center = bool(op.attributes.get("center_point_box"))

        def nms(boxes, scores, max_output=None, iou_threshold=None, score_threshold=None):
            limit = 0 if max_output is None or max_output.numel() == 0 else int(
                max_output.reshape(-1)[0])
            iou_limit = (0.0 if iou_threshold is None or iou_threshold.numel() == 0
                         else float(iou_threshold.reshape(-1)[0]))
            selected = []
            for b in range(scores.shape[0]):
                overlaps = _overlaps(boxes[b], center)
                for c in range(scores.shape[1]):
                    class_scores = scores[b, c]
                    order = torch.sort(class_scores, descending=True, stable=True)[1]
                    if score_threshold is not None and score_threshold.numel():
                        floor = score_threshold.reshape(-1)[0]
                        order = order[class_scores[order] > floor]
                    kept = []
                    for index in order.tolist():
                        if len(kept) >= limit:
                            break
                        if all(overlaps[index, k] <= iou_limit for k in kept):
                            kept.append(index)
                    selected += [(b, c, k) for k in kept]
            return torch.tensor(selected, dtype=torch.int64,
                                device=boxes.device).reshape(-1, 3)
        self._emit(op, nms)
