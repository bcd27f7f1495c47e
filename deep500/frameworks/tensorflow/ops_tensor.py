"""TensorFlowVisitor methods for the elementwise, cast, logical, activation, reduction and
indexing operators of the ONNX operator set (issue 19), mixed into
:class:`deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`: each ``visit_<op>`` uses the
visitor's own helpers and follows https://onnx.ai/onnx/operators/.

Every closure is built from differentiable TensorFlow operations, so that gradients flow
through ``tf.GradientTape``; NumPy only reads constants known at build time. Operators
whose operands TensorFlow has no kernel for (8- and 16-bit integers in ``truncatemod``,
float16 in ``det``) compute in a wider type and cast back.
"""
from __future__ import annotations

import math

import numpy as np
import onnx

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._tf_common import (_axis, _ints, _shape_list, _static,
                                                      _tf_dtype)
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.window import resolve_pads


# -- small helpers of the closures -----------------------------------------------------------
def _attr(op, name, default):
    value = op.attributes.get(name)
    return default if value is None else value


def _wrap_negative(indices, size):
    """Negative indices counted from the end of an axis of ``size`` elements."""
    indices = tf.convert_to_tensor(indices)
    size = tf.cast(size, indices.dtype)
    return tf.where(indices < 0, indices + size, indices)


def _in_wider(fn, x, *rest, types=(tf.float32, tf.float64)):
    """``fn`` on operands cast to a type TensorFlow has a kernel for: float32 for the
    narrower floats, int64 for integers, then cast back."""
    dtype = _tf_dtype(x)
    if dtype in types:
        return fn(x, *rest)
    wide = tf.float32 if dtype.is_floating else tf.int64
    return tf.cast(fn(tf.cast(x, wide), *[tf.cast(r, wide) for r in rest]), dtype)


def _truncated_mod(a, b):
    """C's fmod: the remainder with the sign of the dividend. TensorFlow's TruncateMod
    has no gradient; the result carries d/da = 1, d/db = -trunc(a/b) through terms that
    are exactly zero in value."""
    remainder = tf.stop_gradient(_in_wider(tf.truncatemod, a, b,
                                           types=(tf.int32, tf.int64, tf.float32,
                                                  tf.float64)))
    if not _tf_dtype(remainder).is_floating:
        return remainder
    a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
    quotient = tf.stop_gradient(tf.round((a - remainder) / b))
    return (remainder + (a - tf.stop_gradient(a))
            - quotient * (b - tf.stop_gradient(b)))


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


# -- reductions (x, axis, keepdims) --------------------------------------------------------
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


class TensorOps:
    """Mixin of ``visit_<op>`` methods (see the module docstring). Methods that
    the visitor class defines itself take precedence over these."""

    # -- unary math: https://onnx.ai/onnx/operators/onnx__<Op>.html ---------------------
    def visit_sin(self, op, network) -> None:
        self._unary(op, tf.sin)

    def visit_cos(self, op, network) -> None:
        self._unary(op, tf.cos)

    def visit_tan(self, op, network) -> None:
        self._unary(op, tf.tan)

    def visit_asin(self, op, network) -> None:
        self._unary(op, tf.asin)

    def visit_acos(self, op, network) -> None:
        self._unary(op, tf.acos)

    def visit_atan(self, op, network) -> None:
        self._unary(op, tf.atan)

    def visit_sinh(self, op, network) -> None:
        self._unary(op, tf.sinh)

    def visit_cosh(self, op, network) -> None:
        self._unary(op, tf.cosh)

    def visit_asinh(self, op, network) -> None:
        self._unary(op, tf.asinh)

    def visit_acosh(self, op, network) -> None:
        self._unary(op, tf.acosh)

    def visit_atanh(self, op, network) -> None:
        self._unary(op, tf.atanh)

    def visit_sign(self, op, network) -> None:
        """Sign: -1, 0 or 1 (unsigned integers: 0 or 1)."""
        def sign(x):
            if _tf_dtype(x).is_unsigned:
                return tf.cast(tf.not_equal(x, 0), _tf_dtype(x))
            return tf.sign(x)
        self._unary(op, sign)

    def visit_round(self, op, network) -> None:
        """Round: to the nearest integer, halves to even (as tf.round)."""
        self._unary(op, tf.round)

    def visit_isnan(self, op, network) -> None:
        self._unary(op, tf.math.is_nan)

    def visit_isinf(self, op, network) -> None:
        """IsInf: https://onnx.ai/onnx/operators/onnx__IsInf.html"""
        negative = bool(_attr(op, "detect_negative", 1))
        positive = bool(_attr(op, "detect_positive", 1))

        def is_inf(x):
            infinite = tf.math.is_inf(x)
            if negative and positive:
                return infinite
            if not (negative or positive):
                return tf.zeros_like(infinite)
            return tf.logical_and(infinite, x > 0 if positive else x < 0)
        self._unary(op, is_inf)

    # -- activations -------------------------------------------------------------------
    def visit_elu(self, op, network) -> None:
        """Elu: x if x > 0 else alpha·(exp(x) - 1)."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._unary(op, lambda x: tf.where(x > 0, x, alpha * tf.math.expm1(tf.minimum(x, 0))))

    def visit_selu(self, op, network) -> None:
        """Selu: gamma·(x if x > 0 else alpha·(exp(x) - 1))."""
        alpha = float(_attr(op, "alpha", 1.67326319217681884765625))
        gamma = float(_attr(op, "gamma", 1.05070102214813232421875))
        self._unary(op, lambda x: gamma * tf.where(
            x > 0, x, alpha * tf.math.expm1(tf.minimum(x, 0))))

    def visit_celu(self, op, network) -> None:
        """Celu: max(0, x) + min(0, alpha·(exp(x/alpha) - 1))."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._unary(op, lambda x: tf.nn.relu(x) + alpha * tf.math.expm1(
            tf.minimum(x, 0) / alpha))

    def visit_hardsigmoid(self, op, network) -> None:
        """HardSigmoid: max(0, min(1, alpha·x + beta))."""
        alpha = float(_attr(op, "alpha", 0.2))
        beta = float(_attr(op, "beta", 0.5))
        self._unary(op, lambda x: tf.clip_by_value(alpha * x + beta, 0, 1))

    def visit_hardswish(self, op, network) -> None:
        """HardSwish: x·max(0, min(1, x/6 + 1/2))."""
        self._unary(op, lambda x: x * tf.clip_by_value(x / 6 + 0.5, 0, 1))

    def visit_softsign(self, op, network) -> None:
        self._unary(op, lambda x: x / (1 + tf.abs(x)))

    def visit_thresholdedrelu(self, op, network) -> None:
        """ThresholdedRelu: x if x > alpha else 0."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._unary(op, lambda x: tf.where(x > alpha, x, tf.zeros_like(x)))

    def visit_shrink(self, op, network) -> None:
        """Shrink: x + bias if x < -lambd, x - bias if x > lambd, else 0."""
        bias = float(_attr(op, "bias", 0.0))
        lambd = float(_attr(op, "lambd", 0.5))

        def shrink(x):
            dtype = _tf_dtype(x)
            b = tf.cast(bias, dtype)
            low, high = tf.cast(-lambd, tf.float64), tf.cast(lambd, tf.float64)
            wide = tf.cast(x, tf.float64)
            return tf.where(wide < low, x + b, tf.where(wide > high, x - b, tf.zeros_like(x)))
        self._unary(op, shrink)

    def visit_mish(self, op, network) -> None:
        """Mish: x·tanh(softplus(x)) (https://arxiv.org/abs/1908.08681)."""
        self._unary(op, lambda x: x * tf.tanh(tf.math.softplus(x)))

    def visit_swish(self, op, network) -> None:
        """Swish: x·sigmoid(alpha·x)."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._unary(op, lambda x: x * tf.sigmoid(alpha * x))

    def visit_prelu(self, op, network) -> None:
        """PRelu: slope·x where x < 0 (slope broadcast to x)."""
        def prelu(x, slope):
            return tf.where(x < 0, tf.cast(slope, _tf_dtype(x)) * x, x)
        self._elementwise(op, prelu)

    def visit_swiglu(self, op, network) -> None:
        """SwiGLU: Swish_alpha(A)·B (https://onnx.ai/onnx/operators/onnx__SwiGLU.html)."""
        alpha = float(_attr(op, "alpha", 1.0))
        self._elementwise(op, lambda a, b: a * tf.sigmoid(alpha * a) * b)

    def visit_xor(self, op, network) -> None:
        self._elementwise(op, tf.math.logical_xor)

    # -- integer arithmetic and bits ---------------------------------------------------
    def visit_mod(self, op, network) -> None:
        """Mod: https://onnx.ai/onnx/operators/onnx__Mod.html (fmod=0: the sign of the
        divisor, fmod=1: of the dividend)."""
        fmod = bool(_attr(op, "fmod", 0))

        def mod(a, b):
            if fmod:
                return _truncated_mod(a, b)
            if _tf_dtype(tf.convert_to_tensor(a)) in (tf.float16, tf.bfloat16):
                return _in_wider(tf.math.floormod, a, b)
            return tf.math.floormod(a, b)
        self._elementwise(op, mod)

    def visit_bitshift(self, op, network) -> None:
        """BitShift: https://onnx.ai/onnx/operators/onnx__BitShift.html"""
        direction = _attr(op, "direction", "")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in ("LEFT", "RIGHT"):
            raise self._unsupported(f"BitShift direction must be 'LEFT' or 'RIGHT', got "
                                    f"{direction!r}", "fix the node's attribute")
        left = direction == "LEFT"

        def bit_shift(x, y):
            x = tf.convert_to_tensor(x)
            y = tf.cast(y, _tf_dtype(x))
            bits = _tf_dtype(x).size * 8
            # Shifts by a negative amount or by the width or more: every bit shifted out
            # (an arithmetic right shift leaves the sign).
            out = tf.logical_or(y < 0, y >= bits)
            safe = tf.where(out, tf.zeros_like(y), y)
            if left:
                return tf.where(out, tf.zeros_like(x), tf.bitwise.left_shift(x, safe))
            fill = tf.where(x < 0, tf.cast(-1, _tf_dtype(x)), tf.zeros_like(x))
            return tf.where(out, fill, tf.bitwise.right_shift(x, safe))
        self._elementwise(op, bit_shift)

    def visit_bitcast(self, op, network) -> None:
        """BitCast: the input's bits read as element type ``to`` of the same width
        (https://onnx.ai/onnx/operators/onnx__BitCast.html)."""
        target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(op.attributes["to"])))
        source = self.network.dtypes.get(op.inputs[0])
        if source is not None and np.dtype(source).itemsize != target.itemsize:
            raise self._unsupported(f"BitCast from {np.dtype(source).name} to {target.name} "
                                    f"changes the element width", "cast to a type of "
                                    f"{np.dtype(source).itemsize * 8} bits")
        tf_target = tf.as_dtype(target)

        def bit_cast(x):
            x = tf.convert_to_tensor(x)
            if _tf_dtype(x) == tf_target:
                return x
            if tf_target == tf.bool:      # a byte of 0 or 1
                return tf.not_equal(x, 0)
            if _tf_dtype(x) == tf.bool:
                return tf.bitcast(tf.cast(x, tf.uint8), tf_target)
            return tf.bitcast(x, tf_target)
        self._unary(op, bit_cast)

    def visit_bitwiseand(self, op, network) -> None:
        self._elementwise(op, tf.bitwise.bitwise_and)

    def visit_bitwiseor(self, op, network) -> None:
        self._elementwise(op, tf.bitwise.bitwise_or)

    def visit_bitwisexor(self, op, network) -> None:
        self._elementwise(op, tf.bitwise.bitwise_xor)

    def visit_bitwisenot(self, op, network) -> None:
        self._unary(op, tf.bitwise.invert)

    # -- reductions --------------------------------------------------------------------
    def visit_reducel1(self, op, network) -> None:
        self._reduce(op, _reduce_l1)

    def visit_reducel2(self, op, network) -> None:
        self._reduce(op, _reduce_l2)

    def visit_reducelogsum(self, op, network) -> None:
        self._reduce(op, _reduce_log_sum)

    def visit_reducelogsumexp(self, op, network) -> None:
        self._reduce(op, _reduce_log_sum_exp)

    def visit_reduceprod(self, op, network) -> None:
        self._reduce(op, tf.reduce_prod)

    def visit_reducesumsquare(self, op, network) -> None:
        self._reduce(op, _reduce_sum_square)

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

    def visit_hardmax(self, op, network) -> None:
        """Hardmax: 1 at the first maximum along ``axis``, 0 elsewhere."""
        axis = int(_attr(op, "axis", -1))

        def hardmax(x):
            x = tf.convert_to_tensor(x)
            along = _axis(axis, len(x.shape))
            hit = tf.equal(x, tf.reduce_max(x, axis=along, keepdims=True))
            first = tf.logical_and(hit, tf.equal(tf.cumsum(tf.cast(hit, tf.int32), along), 1))
            return tf.cast(first, _tf_dtype(x))
        self.emit(hardmax, [self.key(op.inputs[0])], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

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

    # -- cumulative --------------------------------------------------------------------
    def _cumulative(self, op, tf_fn) -> None:
        exclusive = bool(_attr(op, "exclusive", 0))
        reverse = bool(_attr(op, "reverse", 0))
        dynamic_error = self._dynamic_error("axis")

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

    # -- matrices ----------------------------------------------------------------------
    def visit_trilu(self, op, network) -> None:
        """Trilu: the upper (or lower) triangle of the last two axes, from diagonal k."""
        upper = bool(_attr(op, "upper", 1))
        inputs = [self.key(op.inputs[0])] + [self.key(n) for n in op.inputs[1:2] if n]

        def trilu(x, k=None):
            x = tf.convert_to_tensor(x)
            shift = tf.constant(0, tf.int64) if k is None else tf.reshape(
                tf.cast(k, tf.int64), [])
            dims = tf.shape(x, out_type=tf.int64)
            rows = tf.range(dims[-2])[:, None]
            cols = tf.range(dims[-1])[None, :]
            keep = cols - rows >= shift if upper else cols - rows <= shift
            return tf.where(keep, x, tf.zeros_like(x))
        self.emit(trilu, inputs, op.outputs[0], rank=self.rank(op.inputs[0]))

    def visit_eyelike(self, op, network) -> None:
        """EyeLike: ones on diagonal k of a matrix shaped as the input."""
        k = int(_attr(op, "k", 0))
        given = op.attributes.get("dtype")
        target = None if given is None else tf.as_dtype(
            onnx.helper.tensor_dtype_to_np_dtype(int(given)))

        def eye_like(x):
            x = tf.convert_to_tensor(x)
            dims = tf.shape(x, out_type=tf.int64)
            diagonal = tf.equal(tf.range(dims[1])[None, :] - tf.range(dims[0])[:, None], k)
            return tf.cast(diagonal, target or _tf_dtype(x))
        self.emit(eye_like, [self.key(op.inputs[0])], op.outputs[0], rank=2)

    def visit_det(self, op, network) -> None:
        """Det: determinants of the (..., M, M) input."""
        def det(x):
            return _in_wider(tf.linalg.det, tf.convert_to_tensor(x))
        self.emit(det, [self.key(op.inputs[0])], op.outputs[0])

    def visit_einsum(self, op, network) -> None:
        """Einsum: https://onnx.ai/onnx/operators/onnx__Einsum.html"""
        equation = _attr(op, "equation", "")
        equation = (equation.decode() if isinstance(equation, bytes) else equation)
        equation = equation.replace(" ", "")

        def einsum(*xs):
            return tf.einsum(equation, *xs)
        self.emit(einsum, [self.key(n) for n in op.inputs], op.outputs[0])

    # -- indexing ----------------------------------------------------------------------
    def visit_tile(self, op, network) -> None:
        """Tile: repeat the input ``repeats[i]`` times along axis i."""
        def tile(x, repeats):
            return tf.tile(x, tf.cast(repeats, tf.int64))
        self.emit(tile, [self.key(op.inputs[0]), self.key(op.inputs[1])], op.outputs[0],
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
        reduction = _attr(op, "reduction", "none")
        reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
        if reduction not in ("none", "add", "mul", "max", "min"):
            raise self._unsupported(f"reduction {reduction!r} is not one of none, add, mul, "
                                    f"max, min", "fix the node's attribute")
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
        mode = _attr(op, "mode", "linear")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ("linear", "circular"):
            raise self._unsupported(f"TensorScatter mode {mode!r} is not 'linear' or "
                                    f"'circular'", "fix the node's attribute")

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
        dynamic_error = self._unsupported(
            "Unique along an axis needs the other axes' sizes when the model is built",
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

    # -- quantization ----------------------------------------------------------------------
    def visit_dequantizelinear(self, op, network) -> None:
        """DequantizeLinear: (x - zero_point)·scale, per tensor, per axis or per block
        (https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html)."""
        axis = int(_attr(op, "axis", 1))
        block_size = int(_attr(op, "block_size", 0))
        given = int(_attr(op, "output_dtype", 0))
        target = tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(given)) if given else None

        def dequantize(x, scale, zero_point=None):
            x, scale = tf.convert_to_tensor(x), tf.convert_to_tensor(scale)
            scale = _quantization_parameter(scale, x, axis, block_size)
            shifted = tf.cast(x, tf.float32)
            if zero_point is not None:
                zero_point = _quantization_parameter(tf.convert_to_tensor(zero_point), x,
                                                     axis, block_size)
                shifted = shifted - tf.cast(zero_point, tf.float32)
            y = shifted * tf.cast(scale, tf.float32) if _tf_dtype(scale) != tf.float64 else (
                tf.cast(shifted, tf.float64) * scale)
            return tf.cast(y, target or _tf_dtype(scale))
        self.emit(dequantize, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_quantizelinear(self, op, network) -> None:
        """QuantizeLinear: saturate(round_half_even(x / scale) + zero_point), per tensor,
        per axis or per block (https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html).
        The division is in ``precision``'s type, else in the wider of x's and scale's."""
        axis = int(_attr(op, "axis", 1))
        block_size = int(_attr(op, "block_size", 0))
        given = int(_attr(op, "output_dtype", 0))
        precision = int(_attr(op, "precision", 0))
        zero_dtype = (self.network.dtypes.get(op.inputs[2]) if len(op.inputs) > 2
                      and op.inputs[2] else None)
        target = np.dtype(zero_dtype if zero_dtype is not None else
                          onnx.helper.tensor_dtype_to_np_dtype(given) if given else np.uint8)
        if target.kind not in "iu":
            raise self._unsupported(f"quantization to {target.name} is not supported "
                                    f"(8-, 16- and 32-bit integers are)")
        low, high = np.iinfo(target).min, np.iinfo(target).max
        divide_in = (tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(precision))
                     if precision else None)

        def quantize(x, scale, zero_point=None):
            x, scale = tf.convert_to_tensor(x), tf.convert_to_tensor(scale)
            scale = _quantization_parameter(scale, x, axis, block_size)
            dtype = divide_in or _wider_float(_tf_dtype(x), _tf_dtype(scale))
            q = tf.round(tf.cast(x, dtype) / tf.cast(scale, dtype))
            q = tf.cast(q, tf.float64)
            if zero_point is not None:
                q = q + tf.cast(_quantization_parameter(tf.convert_to_tensor(zero_point), x,
                                                        axis, block_size), tf.float64)
            return tf.cast(tf.clip_by_value(q, float(low), float(high)), tf.as_dtype(target))
        self.emit(quantize, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_dynamicquantizelinear(self, op, network) -> None:
        """DynamicQuantizeLinear: uint8 quantization with the scale and zero point of the
        input's range, widened to include 0
        (https://onnx.ai/onnx/operators/onnx__DynamicQuantizeLinear.html)."""
        def dynamic_quantize(x):
            x = tf.convert_to_tensor(x)
            high = tf.maximum(tf.reduce_max(x), 0)
            low = tf.minimum(tf.reduce_min(x), 0)
            span = tf.where(tf.equal(high, low), tf.ones_like(high), high - low)
            scale = span / 255
            zero_point = tf.round(tf.clip_by_value(-low / scale, 0, 255))
            y = tf.clip_by_value(tf.round(x / scale) + zero_point, 0, 255)
            return (tf.cast(y, tf.uint8), tf.cast(scale, _tf_dtype(x)),
                    tf.cast(zero_point, tf.uint8))
        self.emit(dynamic_quantize, [self.key(op.inputs[0])], list(op.outputs))

    def visit_qlinearmatmul(self, op, network) -> None:
        """QLinearMatMul: the integer product of the zero-point-shifted operands,
        requantized with scale a_scale·b_scale/y_scale
        (https://onnx.ai/onnx/operators/onnx__QLinearMatMul.html)."""
        y_zero_dtype = self.network.dtypes.get(op.inputs[7]) if len(op.inputs) > 7 else None

        def qlinear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero=None):
            a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
            a_int = tf.cast(a, tf.int32) - tf.cast(a_zero, tf.int32)
            b_int = tf.cast(b, tf.int32) - tf.cast(b_zero, tf.int32)
            product = tf.cast(tf.linalg.matmul(a_int, b_int), tf.float64)
            scale_dtype = _tf_dtype(tf.convert_to_tensor(a_scale))
            factor = (tf.cast(a_scale, scale_dtype) * tf.cast(b_scale, scale_dtype)
                      / tf.cast(y_scale, scale_dtype))
            y = product * tf.cast(factor, tf.float64)
            target = _tf_dtype(a)
            if y_zero is not None:
                y = y + tf.cast(y_zero, tf.float64)
                target = _tf_dtype(tf.convert_to_tensor(y_zero))
            elif y_zero_dtype is not None:
                target = tf.as_dtype(y_zero_dtype)
            bounds = np.iinfo(target.as_numpy_dtype)
            return tf.cast(tf.clip_by_value(tf.round(y), float(bounds.min), float(bounds.max)),
                           target)
        self.emit(qlinear_matmul, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_matmulinteger(self, op, network) -> None:
        """MatMulInteger: the int32 product of the zero-point-shifted operands
        (https://onnx.ai/onnx/operators/onnx__MatMulInteger.html)."""
        def matmul_integer(a, b, a_zero=None, b_zero=None):
            a_int = tf.cast(a, tf.int32)
            b_int = tf.cast(b, tf.int32)
            if a_zero is not None:
                zero = tf.cast(a_zero, tf.int32)
                if len(zero.shape) == 1:   # per row of a
                    zero = zero[:, None]
                a_int = a_int - zero
            if b_zero is not None:
                b_int = b_int - tf.cast(b_zero, tf.int32)   # per column of b broadcasts
            return tf.linalg.matmul(a_int, b_int)
        self.emit(matmul_integer, [self.key(n) for n in op.inputs], op.outputs[0])

    def _integer_conv(self, op, x, w, x_zero, w_zero):
        """The int32 convolution of zero-point-shifted integer operands (NCHW, OIHW), as
        an exact float64 convolution in channels-last."""
        a = op.attributes
        group = int(_attr(op, "group", 1))
        x = tf.cast(x, tf.float64) - (0 if x_zero is None else tf.cast(x_zero, tf.float64))
        w = tf.cast(w, tf.float64)
        if w_zero is not None:
            zero = tf.cast(w_zero, tf.float64)
            # per output channel: (M,) against weights (M, C/group, k...)
            w = w - (tf.reshape(zero, [-1] + [1] * (len(w.shape) - 1))
                     if len(zero.shape) == 1 else zero)
        spatial = len(x.shape) - 2
        kernel = list(w.shape[2:])
        strides = list(a.get("strides") or [1] * spatial)
        dilations = list(a.get("dilations") or [1] * spatial)
        begin, end = resolve_pads(op.op_type, list(x.shape[2:]), kernel, strides=strides,
                                  dilations=dilations, pads=a.get("pads"),
                                  auto_pad=_attr(op, "auto_pad", "NOTSET"))
        channels_last = tf.transpose(x, [0] + list(range(2, spatial + 2)) + [1])
        channels_last = tf.pad(channels_last, [[0, 0]] + [[b, e] for b, e in zip(begin, end)]
                               + [[0, 0]])
        filters = tf.transpose(w, list(range(2, spatial + 2)) + [1, 0])
        outputs = [tf.nn.convolution(xg, wg, strides=strides, padding="VALID",
                                     dilations=dilations)
                   for xg, wg in zip(tf.split(channels_last, group, axis=-1),
                                     tf.split(filters, group, axis=-1))]
        y = outputs[0] if group == 1 else tf.concat(outputs, axis=-1)
        return tf.transpose(y, [0, spatial + 1] + list(range(1, spatial + 1)))

    def visit_convinteger(self, op, network) -> None:
        """ConvInteger: https://onnx.ai/onnx/operators/onnx__ConvInteger.html"""
        def conv_integer(x, w, x_zero=None, w_zero=None):
            return tf.cast(tf.round(self._integer_conv(op, x, w, x_zero, w_zero)), tf.int32)
        self.emit(conv_integer, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_qlinearconv(self, op, network) -> None:
        """QLinearConv: the integer convolution (plus int32 bias), requantized with
        x_scale·w_scale/y_scale (https://onnx.ai/onnx/operators/onnx__QLinearConv.html)."""
        def qlinear_conv(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias=None):
            y = self._integer_conv(op, x, w, x_zero, w_zero)
            if bias is not None:
                y = y + tf.reshape(tf.cast(bias, tf.float64), [-1] + [1] * (len(y.shape) - 2))
            w_scale = tf.cast(w_scale, tf.float64)
            if len(w_scale.shape) == 1:   # per output channel
                w_scale = tf.reshape(w_scale, [-1] + [1] * (len(y.shape) - 2))
            scale = tf.cast(x_scale, tf.float64) * w_scale / tf.cast(y_scale, tf.float64)
            target = _tf_dtype(tf.convert_to_tensor(y_zero))
            y = tf.round(y * scale) + tf.cast(y_zero, tf.float64)
            bounds = np.iinfo(target.as_numpy_dtype)
            return tf.cast(tf.clip_by_value(y, float(bounds.min), float(bounds.max)), target)
        self.emit(qlinear_conv, [self.key(n) for n in op.inputs], op.outputs[0])

    # -- windows and spectra -------------------------------------------------------------
    def _window(self, op, coefficients) -> None:
        """A cosine-sum window sum_k c_k·cos(2πkn/N') of ``size`` points, N' = size
        (periodic) or size - 1 (symmetric), signs alternating."""
        periodic = bool(_attr(op, "periodic", 1))
        output = int(_attr(op, "output_datatype", onnx.TensorProto.FLOAT))
        dtype = tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(output))

        def window(size):
            n = tf.reshape(tf.cast(size, tf.int64), [])
            period = tf.cast(n if periodic else n - 1, tf.float64)
            phase = 2 * math.pi * tf.cast(tf.range(n), tf.float64) / period
            values = sum((-1) ** k * c * tf.cos(k * phase) for k, c in enumerate(coefficients))
            return tf.cast(values, dtype)
        self.emit(window, [self.key(op.inputs[0])], op.outputs[0], rank=1)

    def visit_hannwindow(self, op, network) -> None:
        """HannWindow: https://onnx.ai/onnx/operators/onnx__HannWindow.html"""
        self._window(op, (0.5, 0.5))

    def visit_hammingwindow(self, op, network) -> None:
        """HammingWindow: https://onnx.ai/onnx/operators/onnx__HammingWindow.html"""
        self._window(op, (25 / 46, 21 / 46))

    def visit_blackmanwindow(self, op, network) -> None:
        """BlackmanWindow: https://onnx.ai/onnx/operators/onnx__BlackmanWindow.html"""
        self._window(op, (0.42, 0.5, 0.08))

    def visit_melweightmatrix(self, op, network) -> None:
        """MelWeightMatrix: triangular filters, peak 1, between mel-spaced edges mapped to
        spectrogram bins (https://onnx.ai/onnx/operators/onnx__MelWeightMatrix.html; as
        onnx's reference, num_mel_bins + 2 steps span the mel range)."""
        output = int(_attr(op, "output_datatype", onnx.TensorProto.FLOAT))
        dtype = tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(output))

        def mel_weight_matrix(mel_bins, dft_length, sample_rate, lower_hz, upper_hz):
            count = tf.reshape(tf.cast(mel_bins, tf.int64), [])
            length = tf.reshape(tf.cast(dft_length, tf.float64), [])
            rate = tf.reshape(tf.cast(sample_rate, tf.float64), [])

            def mel(hz):
                return 2595 * tf.math.log1p(tf.reshape(tf.cast(hz, tf.float64), []) / 700) \
                    / math.log(10)
            low, high = mel(lower_hz), mel(upper_hz)
            edges = tf.range(count + 2, dtype=tf.float64)
            edges = edges * ((high - low) / tf.cast(count + 2, tf.float64)) + low
            edges = 700 * tf.math.expm1(edges / 2595 * math.log(10))
            edges = tf.floor((length + 1) * edges / rate)
            left, center, right = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
            rows = tf.cast(tf.range(tf.cast(length, tf.int64) // 2 + 1), tf.float64)[:, None]
            zero = tf.zeros_like(rows * left)
            rising = tf.where((rows >= left) & (rows <= center) & (center > left),
                              (rows - left) / tf.maximum(center - left, 1), zero)
            rising = tf.where((center == left) & (rows == center), tf.ones_like(zero), rising)
            falling = (rows >= center) & (rows < right) & (right > center)
            weights = tf.where(falling, (right - rows) / tf.maximum(right - center, 1),
                               rising)
            return tf.cast(weights, dtype)
        self.emit(mel_weight_matrix, [self.key(n) for n in op.inputs], op.outputs[0], rank=2)

    def visit_dft(self, op, network) -> None:
        """DFT: https://onnx.ai/onnx/operators/onnx__DFT.html (the last axis holds the
        real and, if of length 2, imaginary parts; ``axis`` an input from opset 20)."""
        inverse = bool(_attr(op, "inverse", 0))
        onesided = bool(_attr(op, "onesided", 0))
        attribute_axis = op.attributes.get("axis")
        inputs = [self.key(op.inputs[0])] + [self.static_key(n) for n in op.inputs[1:3]]
        dynamic_error = self._dynamic_error("dft_length and axis")

        def dft(x, length=None, axis=None):
            x = tf.convert_to_tensor(x)
            rank = len(x.shape)
            along = (int(attribute_axis) if attribute_axis is not None else -2) \
                if axis is None else _ints(axis)
            if along is None:
                raise dynamic_error
            along = along[0] if isinstance(along, list) else along
            along = _axis(along, rank)
            if along == rank - 1:
                raise ShapeError(f"DFT node '{op.name}': axis {along} is the real/imaginary "
                                 f"axis; transform one of the first {rank - 1} axes")
            parts = tf.cast(x, tf.float64)   # float32 FFTs err by ~1e-6 of the sum
            signal = (tf.complex(parts[..., 0], parts[..., 1]) if x.shape[-1] == 2
                      else tf.complex(parts[..., 0], tf.zeros_like(parts[..., 0])))
            perm = [a for a in range(rank - 1) if a != along] + [along]
            signal = tf.transpose(signal, perm)
            n = signal.shape[-1]
            irfft = inverse and onesided
            if length is not None:
                wanted = _ints(length)
                if wanted is None:
                    raise dynamic_error
                wanted = wanted[0]
            else:
                wanted = 2 * (n - 1) if irfft else n
            if irfft:   # a one-sided spectrum to a real signal of dft_length points
                signal = tf.signal.irfft(signal, fft_length=[wanted])
                signal = tf.transpose(signal, list(np.argsort(perm)))
                return tf.cast(signal[..., None], _tf_dtype(x))
            if length is not None:
                if wanted < n:
                    signal = signal[..., :wanted]
                elif wanted > n:
                    pad = [[0, 0]] * (len(signal.shape) - 1) + [[0, wanted - n]]
                    signal = tf.pad(signal, pad)
                n = wanted
            spectrum = tf.signal.ifft(signal) if inverse else tf.signal.fft(signal)
            if onesided:
                spectrum = spectrum[..., :n // 2 + 1]
            spectrum = tf.transpose(spectrum, list(np.argsort(perm)))
            out = tf.stack([tf.math.real(spectrum), tf.math.imag(spectrum)], axis=-1)
            return tf.cast(out, _tf_dtype(x))
        self.emit(dft, inputs, op.outputs[0], rank=self.rank(op.inputs[0]))

    # -- detection -------------------------------------------------------------------------
    def visit_nonmaxsuppression(self, op, network) -> None:
        """NonMaxSuppression: per batch and class, greedily the highest-scoring boxes whose
        IoU with every selected one is at most iou_threshold, scores above
        score_threshold (https://onnx.ai/onnx/operators/onnx__NonMaxSuppression.html)."""
        center = bool(_attr(op, "center_point_box", 0))
        inputs = [self.key(op.inputs[0]), self.key(op.inputs[1])]
        inputs += [self.static_key(n) for n in op.inputs[2:3]]
        inputs += [self.key(n) for n in op.inputs[3:5]]
        dynamic_error = self._dynamic_error("max_output_boxes_per_class")

        def scalar_or(value, default):   # an optional input, possibly empty
            if value is None:
                return tf.constant(default, tf.float32)
            flat = tf.reshape(tf.cast(value, tf.float32), [-1])
            return tf.concat([flat, [default]], 0)[0]

        def non_max_suppression(boxes, scores, max_boxes=None, iou=None, threshold=None):
            boxes, scores = tf.convert_to_tensor(boxes), tf.convert_to_tensor(scores)
            limit = _ints(max_boxes) if max_boxes is not None else [0]
            if limit is None:
                raise dynamic_error
            limit = limit[0] if limit else 0
            if center:
                middle, size = boxes[..., :2], boxes[..., 2:] / 2
                boxes = tf.concat([middle - size, middle + size], axis=-1)
                boxes = tf.gather(boxes, [1, 0, 3, 2], axis=-1)   # as y1, x1, y2, x2
            iou_value = scalar_or(iou, 0.0)
            score_value = scalar_or(threshold, float("-inf"))
            selected = []
            if limit > 0:
                for b in range(boxes.shape[0]):
                    for c in range(scores.shape[1]):
                        kept = tf.image.non_max_suppression(
                            tf.cast(boxes[b], tf.float32), tf.cast(scores[b, c], tf.float32),
                            limit, iou_value, score_value)
                        kept = tf.cast(kept, tf.int64)
                        prefix = tf.broadcast_to(tf.constant([b, c], tf.int64),
                                                 tf.stack([tf.size(kept), 2]))
                        selected.append(tf.concat([tf.cast(prefix, tf.int64),
                                                   kept[:, None]], axis=1))
            if not selected:
                return tf.zeros([0, 3], tf.int64)
            return tf.concat(selected, axis=0)
        self.emit(non_max_suppression, inputs, op.outputs[0], rank=2)


    def visit_stft(self, op, network) -> None:
        """STFT: the DFT of each frame_step-spaced frame, windowed, one-sided for real
        signals by default (https://onnx.ai/onnx/operators/onnx__STFT.html)."""
        onesided = bool(_attr(op, "onesided", 1))
        inputs = [self.key(op.inputs[0]), self.static_key(op.inputs[1])]
        inputs += [self.key(n) for n in op.inputs[2:3]]
        inputs += [self.static_key(n) for n in op.inputs[3:4]]
        dynamic_error = self._dynamic_error("frame_step and frame_length")

        def stft(signal, step, window=None, length=None):
            signal = tf.convert_to_tensor(signal)
            step = _ints(step)
            size = _ints(length) if length is not None else (
                [window.shape[0]] if window is not None else None)
            if step is None or size is None or None in size:
                raise dynamic_error
            parts = tf.cast(signal, tf.float64)
            values = (tf.complex(parts[..., 0], parts[..., 1]) if signal.shape[-1] == 2
                      else tf.complex(parts[..., 0], tf.zeros_like(parts[..., 0])))
            frames = tf.signal.frame(values, size[0], step[0], axis=1)
            if window is not None:
                frames = frames * tf.complex(tf.cast(window, tf.float64),
                                             tf.zeros([size[0]], tf.float64))
            spectrum = tf.signal.fft(frames)
            if onesided:
                spectrum = spectrum[..., :size[0] // 2 + 1]
            out = tf.stack([tf.math.real(spectrum), tf.math.imag(spectrum)], axis=-1)
            return tf.cast(out, _tf_dtype(signal))
        self.emit(stft, inputs, op.outputs[0], rank=4)

    # -- rearrangements --------------------------------------------------------------------
    def _depth_space(self, op, to_depth: bool) -> None:
        block = int(op.attributes["blocksize"])
        mode = _attr(op, "mode", "DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ("DCR", "CRD"):
            raise self._unsupported(f"mode {mode!r} is not 'DCR' or 'CRD'",
                                    "fix the node's attribute")
        self._check_rank(op.inputs[0], 4, "the operator rearranges (N, C, H, W) tensors")

        def rearrange(x):
            x = tf.convert_to_tensor(x)
            n, c, h, w = _shape_list(x)
            if to_depth:
                split = tf.reshape(x, tf.stack([n, c, h // block, block, w // block, block]))
                perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
                return tf.reshape(tf.transpose(split, perm),
                                  tf.stack([n, c * block * block, h // block, w // block]))
            depth = c // (block * block)
            if mode == "DCR":
                split = tf.reshape(x, tf.stack([n, block, block, depth, h, w]))
                perm = [0, 3, 4, 1, 5, 2]
            else:
                split = tf.reshape(x, tf.stack([n, depth, block, block, h, w]))
                perm = [0, 1, 4, 2, 5, 3]
            return tf.reshape(tf.transpose(split, perm),
                              tf.stack([n, depth, h * block, w * block]))
        self.emit(rearrange, [self.key(op.inputs[0])], op.outputs[0], rank=4)

    def visit_spacetodepth(self, op, network) -> None:
        """SpaceToDepth: https://onnx.ai/onnx/operators/onnx__SpaceToDepth.html"""
        self._depth_space(op, True)

    def visit_depthtospace(self, op, network) -> None:
        """DepthToSpace: https://onnx.ai/onnx/operators/onnx__DepthToSpace.html"""
        self._depth_space(op, False)

    # -- ai.onnx.ml -------------------------------------------------------------------------
    def visit_binarizer(self, op, network) -> None:
        """Binarizer (ai.onnx.ml): 1 where x > threshold, else 0, in x's type."""
        threshold = float(_attr(op, "threshold", 0.0))
        self._unary(op, lambda x: tf.cast(x > tf.cast(threshold, _tf_dtype(x)), _tf_dtype(x)))

    def visit_arrayfeatureextractor(self, op, network) -> None:
        """ArrayFeatureExtractor (ai.onnx.ml): the last axis' elements at the (flattened)
        indices; a vector input gives one row."""
        def extract(x, indices):
            x = tf.convert_to_tensor(x)
            picked = tf.gather(x, tf.reshape(tf.cast(indices, tf.int64), [-1]), axis=-1)
            return picked[None, :] if len(x.shape) == 1 else picked
        self.emit(extract, [self.key(n) for n in op.inputs], op.outputs[0])

    # -- ai.onnx.preview.training: one optimizer step --------------------------------------
    def _optimizer_groups(self, op, per_tensor: int):
        """R, T and ``per_tensor`` groups of n tensors (X, G, then the states)."""
        rest = len(op.inputs) - 2
        if rest % per_tensor:
            raise self._unsupported(f"{op.op_type} takes R, T and {per_tensor} tensors per "
                                    f"optimized tensor; it has {len(op.inputs)} inputs")
        return rest // per_tensor

    def visit_adagrad(self, op, network) -> None:
        """Adagrad (ai.onnx.preview.training, https://jmlr.org/papers/v12/duchi11a.html):
        https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adagrad.html"""
        decay = float(_attr(op, "decay_factor", 0.0))
        epsilon = float(_attr(op, "epsilon", 1e-6))
        norm = float(_attr(op, "norm_coefficient", 0.0))
        n = self._optimizer_groups(op, 3)

        def adagrad(rate, step, *tensors):
            xs, gs, hs = tensors[:n], tensors[n:2 * n], tensors[2 * n:]
            r = tf.cast(rate, tf.float64) / (1 + tf.cast(step, tf.float64) * decay)
            new_x, new_h = [], []
            for x, g, h in zip(xs, gs, hs):
                g = norm * x + g
                h = h + g * g
                new_h.append(h)
                new_x.append(x - tf.cast(r, _tf_dtype(x)) * g / (tf.sqrt(h) + epsilon))
            return tuple(new_x + new_h)
        self.emit(adagrad, [self.key(n) for n in op.inputs], list(op.outputs))

    def visit_momentum(self, op, network) -> None:
        """Momentum (ai.onnx.preview.training), standard or Nesterov:
        https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Momentum.html"""
        alpha = float(op.attributes["alpha"])
        beta = float(op.attributes["beta"])
        norm = float(op.attributes["norm_coefficient"])
        mode = op.attributes["mode"]
        nesterov = (mode.decode() if isinstance(mode, bytes) else mode) == "nesterov"
        n = self._optimizer_groups(op, 3)

        def momentum(rate, step, *tensors):
            xs, gs, vs = tensors[:n], tensors[n:2 * n], tensors[2 * n:]
            first = tf.reshape(step, []) <= 0   # the first step takes the gradient whole
            new_x, new_v = [], []
            for x, g, v in zip(xs, gs, vs):
                r = tf.cast(rate, _tf_dtype(x))
                g = norm * x + g
                v = alpha * v + tf.where(first, tf.ones_like(g), beta * tf.ones_like(g)) * g
                new_v.append(v)
                new_x.append(x - r * (g + alpha * v) if nesterov else x - r * v)
            return tuple(new_x + new_v)
        self.emit(momentum, [self.key(n) for n in op.inputs], list(op.outputs))

    def visit_adam(self, op, network) -> None:
        """Adam (ai.onnx.preview.training, https://arxiv.org/abs/1412.6980):
        https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adam.html"""
        alpha = float(_attr(op, "alpha", 0.9))
        beta = float(_attr(op, "beta", 0.999))
        epsilon = float(_attr(op, "epsilon", 1e-6))
        norm = float(_attr(op, "norm_coefficient", 0.0))
        norm_post = float(_attr(op, "norm_coefficient_post", 0.0))
        n = self._optimizer_groups(op, 4)

        def adam(rate, step, *tensors):
            xs, gs = tensors[:n], tensors[n:2 * n]
            vs, hs = tensors[2 * n:3 * n], tensors[3 * n:]
            t = tf.cast(tf.reshape(step, []), tf.float64)
            r = tf.reshape(tf.cast(rate, tf.float64), [])
            corrected = r * tf.sqrt(1 - beta ** t) / (1 - alpha ** t)
            r = tf.where(t > 0, corrected, r)
            new_x, new_v, new_h = [], [], []
            for x, g, v, h in zip(xs, gs, vs, hs):
                g = norm * x + g
                v = alpha * v + (1 - alpha) * g
                h = beta * h + (1 - beta) * g * g
                new_v.append(v)
                new_h.append(h)
                x = x - tf.cast(r, _tf_dtype(x)) * (v / (tf.sqrt(h) + epsilon))
                new_x.append((1 - norm_post) * x)
            return tuple(new_x + new_v + new_h)
        self.emit(adam, [self.key(n) for n in op.inputs], list(op.outputs))

    def visit_tfidfvectorizer(self, op, network) -> None:
        """TfIdfVectorizer: counts of the pool's n-grams (with skips) per row, weighted as
        TF, IDF or TFIDF (https://onnx.ai/onnx/operators/onnx__TfIdfVectorizer.html)."""
        a = op.attributes
        if a.get("pool_int64s") is None:
            raise self._unsupported("string n-gram pools (pool_strings) are not supported",
                                    "use integer token ids (pool_int64s)")
        shortest, longest = int(a["min_gram_length"]), int(a["max_gram_length"])
        max_skip = int(a["max_skip_count"])
        mode = a["mode"].decode() if isinstance(a["mode"], bytes) else a["mode"]
        pool = [int(v) for v in a["pool_int64s"]]
        starts = [int(v) for v in a["ngram_counts"]] + [len(pool)]
        indexes = [int(v) for v in a["ngram_indexes"]]
        size = max(indexes) + 1
        weights = (np.ones(size, np.float32) if a.get("weights") is None
                   else np.asarray(a["weights"], np.float32))
        groups, first = {}, 0   # n → (pool n-grams (P, n), their output columns (P, size))
        for n, (begin, end) in enumerate(zip(starts[:-1], starts[1:]), start=1):
            grams = np.asarray(pool[begin:end], np.int64).reshape(-1, n)
            columns = np.eye(size, dtype=np.float32)[indexes[first:first + len(grams)]]
            groups[n], first = (grams, columns), first + len(grams)

        def tfidf(x):
            x = tf.cast(x, tf.int64)
            vector = len(x.shape) == 1
            rows = x[None] if vector else x
            length = rows.shape[1]
            total = tf.zeros(tf.stack([tf.shape(rows)[0], size]), tf.float32)
            for n in range(shortest, longest + 1):
                if n not in groups or not len(groups[n][0]):
                    continue
                grams, columns = groups[n]
                for distance in range(1, max_skip + 2) if n > 1 else (1,):
                    starts_ = length - (n - 1) * distance
                    if starts_ <= 0:
                        continue
                    windows = tf.stack([rows[:, j * distance:j * distance + starts_]
                                        for j in range(n)], axis=-1)         # (B, L, n)
                    hits = tf.reduce_all(tf.equal(windows[:, :, None, :], grams), axis=-1)
                    counts = tf.reduce_sum(tf.cast(hits, tf.float32), axis=1)  # (B, P)
                    total = total + tf.linalg.matmul(counts, columns)
            if mode == "IDF":
                total = tf.where(total > 0, weights, tf.zeros_like(total))
            elif mode == "TFIDF":
                total = total * weights
            return total[0] if vector else total
        self.emit(tfidf, [self.key(op.inputs[0])], op.outputs[0])

    def visit_roialign(self, op, network) -> None:
        """RoiAlign (https://arxiv.org/abs/1703.06870): per region and output bin, the
        average (or the largest weighted corner term, in max mode) of bilinear samples
        on a regular grid (https://onnx.ai/onnx/operators/onnx__RoiAlign.html)."""
        half_pixel = _attr(op, "coordinate_transformation_mode", "half_pixel")
        half_pixel = (half_pixel.decode() if isinstance(half_pixel, bytes)
                      else half_pixel) == "half_pixel"
        mode = _attr(op, "mode", "avg")
        use_max = (mode.decode() if isinstance(mode, bytes) else mode) == "max"
        out_h, out_w = int(_attr(op, "output_height", 1)), int(_attr(op, "output_width", 1))
        ratio = int(_attr(op, "sampling_ratio", 0))
        scale = float(_attr(op, "spatial_scale", 1.0))
        offset = 0.5 if half_pixel else 0.0
        self._check_rank(op.inputs[0], 4, "RoiAlign pools (N, C, H, W) feature maps")
        inputs = [self.key(op.inputs[0]), self.static_key(op.inputs[1]),
                  self.key(op.inputs[2])]
        dynamic_error = self._dynamic_error("regions (which decide the sampling grids)")

        def axis_samples(start, extent, bins, grid, size):
            """Per sample along one axis: (low index, high index, weight of low, weight
            of high), zero weights outside [-1, size]."""
            step = extent / bins
            positions = (start + tf.range(bins, dtype=tf.float64)[:, None] * step
                         + (tf.range(grid, dtype=tf.float64)[None, :] + 0.5) * step / grid)
            positions = tf.reshape(positions, [-1])
            valid = tf.logical_and(positions >= -1.0, positions <= size)
            positions = tf.maximum(positions, 0.0)
            low = tf.minimum(tf.floor(positions), size - 1)
            positions = tf.where(low >= size - 1, low, positions)
            high = tf.minimum(low + 1, size - 1)
            frac = positions - low
            zero = tf.zeros_like(frac)
            return (tf.cast(low, tf.int64), tf.cast(high, tf.int64),
                    tf.where(valid, 1 - frac, zero), tf.where(valid, frac, zero))

        def roi_align(x, rois, batch_indices):
            x = tf.convert_to_tensor(x)
            boxes = (rois.numpy() if isinstance(rois, tf.Variable) and tf.executing_eagerly()
                     else _static(rois))
            if boxes is None:
                raise dynamic_error
            height, width = x.shape[2], x.shape[3]
            batch = tf.cast(tf.reshape(batch_indices, [-1]), tf.int64)
            pooled = []
            for r, (x1, y1, x2, y2) in enumerate(np.asarray(boxes, np.float64)):
                start_w, start_h = x1 * scale - offset, y1 * scale - offset
                roi_w, roi_h = x2 * scale - offset - start_w, y2 * scale - offset - start_h
                if not half_pixel:
                    roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
                grid_h = ratio if ratio > 0 else int(math.ceil(roi_h / out_h))
                grid_w = ratio if ratio > 0 else int(math.ceil(roi_w / out_w))
                y_lo, y_hi, wy_lo, wy_hi = axis_samples(start_h, roi_h, out_h, grid_h, height)
                x_lo, x_hi, wx_lo, wx_hi = axis_samples(start_w, roi_w, out_w, grid_w, width)
                image = tf.cast(tf.gather(x, batch[r]), tf.float64)      # (C, H, W)
                terms = []
                for rows, wy in ((y_lo, wy_lo), (y_hi, wy_hi)):
                    picked = tf.gather(image, rows, axis=1)
                    for cols, wx in ((x_lo, wx_lo), (x_hi, wx_hi)):
                        terms.append(tf.gather(picked, cols, axis=2)
                                     * wy[:, None] * wx[None, :])
                shape = [-1, out_h, grid_h, out_w, grid_w]
                if use_max:
                    best = tf.reduce_max(tf.stack(terms), axis=0)
                    pooled.append(tf.reduce_max(tf.reshape(best, shape), axis=[2, 4]))
                else:
                    total = tf.reshape(tf.add_n(terms), shape)
                    count = max(grid_h * grid_w, 1)
                    pooled.append(tf.reduce_sum(total, axis=[2, 4]) / count)
            if not pooled:
                return tf.zeros([0, x.shape[1], out_h, out_w], _tf_dtype(x))
            return tf.cast(tf.stack(pooled), _tf_dtype(x))
        self.emit(roi_align, inputs, op.outputs[0], rank=4)

# -- helpers of the quantization operators ---------------------------------------------------
def _quantization_parameter(parameter, x, axis, block_size):
    """A scale or zero point shaped to broadcast against ``x``: a scalar as is, a vector
    along ``axis``, or (blocked) each element repeated ``block_size`` times along it."""
    rank = len(x.shape)
    if len(parameter.shape) == 0 or (len(parameter.shape) == 1 and parameter.shape[0] == 1
                                     and block_size == 0):
        return tf.reshape(parameter, [])
    along = _axis(axis, rank)
    if block_size > 0:
        repeated = tf.repeat(parameter, block_size, axis=along)
        return repeated[(slice(None),) * along + (slice(0, x.shape[along]),)]
    shape = [1] * rank
    shape[along] = -1
    return tf.reshape(parameter, shape)


def _wider_float(a, b):
    for dtype in (tf.float64, tf.float32, tf.bfloat16):
        if dtype in (a, b):
            return dtype
    return tf.float16
