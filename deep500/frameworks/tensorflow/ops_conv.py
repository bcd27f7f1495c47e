"""TensorFlowVisitor: convolution and pooling (channels-last, window geometry from
``deep500.utils.onnx_interop.window``) and dense linear algebra (Gemm, MatMul).
https://onnx.ai/onnx/operators/onnx__Conv.html
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._tf_common import (FLAT, _like, ParameterLayout,
                                                      _shape_list, _tf_dtype)
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.window import (resolve_pads, same_pads, window_counts,
                                               window_geometry)


def _tf_padding(sizes, kernel, strides, pads):
    """TensorFlow's padding for ONNX's per-axis (begin, end) ``pads`` of a window
    operation: ``("SAME" or "VALID", None)`` where these select the same windows, else
    ``("VALID", explicit zero padding)``. The end padding is cut to what the last window
    reads. (TensorFlow's gradient kernels for explicit padding are 2-4x slower than
    for SAME, and slower than a separate Pad.)"""
    trimmed = []
    for size, k, s, (begin, end) in zip(sizes, kernel, strides, pads):
        if size is not None:
            out = (size + begin + end - k) // s + 1
            end = min(end, max(0, (out - 1) * s + k - size - begin))
        trimmed.append((begin, end))
    if not any(b or e for b, e in trimmed):
        return "VALID", None
    if None not in sizes and trimmed == list(zip(*same_pads(sizes, kernel, strides,
                                                            [1] * len(kernel)))):
        return "SAME", None
    return "VALID", [[0, 0]] + [list(p) for p in trimmed] + [[0, 0]]


def _dilate_filter(w, dilations):
    """A (k1, ..., kn, I, O) filter with dilation - 1 zeros between taps, so that an
    undilated convolution computes the dilated one (TensorFlow's CPU kernels have no
    gradients for dilations > 1)."""
    rank = len(w.shape)
    for axis, rate in enumerate(dilations):
        if rate == 1:
            continue
        shape = _shape_list(w)
        taps = shape[axis]
        spaced = tf.pad(tf.expand_dims(w, axis + 1),
                        [[0, rate - 1] if a == axis + 1 else [0, 0] for a in range(rank + 1)])
        shape[axis] = taps * rate
        w = tf.reshape(spaced, shape)[(slice(None),) * axis + (slice(0, rate * (taps - 1) + 1),)]
    return w


def _conv_same_group(x, w, strides, padding):
    """One ungrouped convolution of channels-last ``x`` (already padded) with a
    (k..., I, O) filter."""
    if len(strides) == 2:
        return tf.nn.conv2d(x, w, [1, *strides, 1], padding)
    return tf.nn.conv3d(x, w, [1, *strides, 1], padding)


def _conv_channels_last(x, w, strides, padding, group):
    """ONNX Conv on channels-last ``x`` and a (k..., C/group, M) filter ``w``, with
    ``padding`` from :func:`_tf_padding` (of the 2-D form for a 1-D convolution)."""
    if len(strides) == 1:
        # A 1-D convolution is a 2-D one over a height of 1.
        y = _conv_channels_last(tf.expand_dims(x, 1), tf.expand_dims(w, 0), [1, *strides],
                                padding, group)
        return tf.squeeze(y, 1)
    mode, explicit = padding
    if explicit is not None:
        x = tf.pad(x, explicit)
    if group == 1:
        return _conv_same_group(x, w, strides, mode)
    channels = x.shape[-1]
    if len(strides) == 2 and group == channels and strides[0] == strides[1]:
        # Depthwise: output channel c·m + j reads input channel c, as ONNX's grouping.
        # (Explicit padding must stay a separate Pad: Grappler's fusion of a depthwise
        # convolution with explicit padding and a BiasAdd aborts the process, TF 2.21.)
        kh, kw, _, outputs = _shape_list(w)
        filters = tf.reshape(w, [kh, kw, channels, outputs // channels])
        return tf.nn.depthwise_conv2d(x, filters, [1, *strides, 1], mode)
    # TensorFlow's CPU kernels have no gradient for grouped convolutions: one per group.
    return tf.concat([_conv_same_group(xg, wg, strides, mode)
                      for xg, wg in zip(tf.split(x, group, axis=-1),
                                        tf.split(w, group, axis=-1))], axis=-1)


def _average_factor(geometry, count_include_pad, dtype):
    """Per output position, (kernel size) / (elements ONNX averages over), shaped to
    multiply a channels-last VALID average pool of the padded input."""
    count = window_counts(geometry, count_include_pad)
    factor = (np.prod(geometry.kernel) / count).astype(dtype)
    return None if np.all(factor == 1) else factor[np.newaxis, ..., np.newaxis]


def _pool_by_slices(x, kernel, strides, dilations, kind):
    """Max or sum pooling of a channels-last (already padded) tensor, one strided slice
    per kernel tap: TensorFlow's pooling kernels take no dilations."""
    sizes = x.shape[1:-1]
    outs = [(n - (k - 1) * d - 1) // s + 1 for n, k, s, d in zip(sizes, kernel, strides,
                                                                  dilations)]
    result = None
    for taps in itertools.product(*[range(k) for k in kernel]):
        index = (slice(None),) + tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                                       for t, d, o, s in zip(taps, dilations, outs, strides))
        part = x[index + (slice(None),)]
        if result is None:
            result = part
        else:
            result = tf.maximum(result, part) if kind == "MAX" else result + part
    return result


class ConvolutionOps:
    """``visit_<op>`` of convolution, pooling and linear algebra, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`, whose helpers they use
    (``emit``, ``key``, ``rank``, ``layout``, ``_value``, ``_unsupported``, ...)."""

    def visit_conv(self, op, network) -> None:
        """Conv: https://onnx.ai/onnx/operators/onnx__Conv.html"""
        a = op.attributes
        w_rank = self.rank(op.inputs[1]) or self.rank(op.inputs[0])
        if w_rank is None:
            raise self._unsupported("the rank of the convolution is unknown",
                                    "give the weight or input tensor a static shape")
        spatial = w_rank - 2
        if spatial not in (1, 2, 3):
            raise self._unsupported(f"{spatial}-D convolutions are not supported "
                                    f"(1-D, 2-D and 3-D are)")
        self._check_rank(op.inputs[0], w_rank, f"its weight has rank {w_rank}")
        strides = list(a["strides"] or [1] * spatial)
        dilations = list(a["dilations"] or [1] * spatial)
        group = int(a["group"] or 1)
        auto_pad = a["auto_pad"] or "NOTSET"
        pads = a["pads"]
        dilated = any(d != 1 for d in dilations)
        to_filter = tuple(range(2, spatial + 2)) + (1, 0)   # OIk... → k...IO
        w_name = op.inputs[1]
        stored = self._only_consumed_as(w_name, lambda use, index: (
            use.op_type == "Conv" and index == 1))
        if stored:
            self._store_parameter(w_name, ParameterLayout.filter(self._stored_shape(w_name)))

        @functools.lru_cache(maxsize=32)
        def padding(sizes, kernel):
            pad = list(zip(*resolve_pads(op.op_type, sizes, kernel, strides=strides,
                                         dilations=dilations, pads=pads,
                                         auto_pad=auto_pad)))
            effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
            if spatial == 1:   # computed as 2-D, over a height of 1
                return _tf_padding((1, *sizes), (1, *effective), (1, *strides),
                                   [(0, 0), *pad])
            return _tf_padding(sizes, effective, strides, pad)

        def conv(x, w, b=None):
            if stored:   # already (k..., I, O)
                pad = padding(tuple(x.shape[1:-1]), tuple(w.shape[:-2]))
            else:
                pad = padding(tuple(x.shape[1:-1]), tuple(w.shape[2:]))
                w = tf.transpose(w, to_filter)
            if dilated:
                w = _dilate_filter(w, dilations)
            y = _conv_channels_last(x, _like(w, x), strides, pad, group)
            return y if b is None else tf.nn.bias_add(y, _like(b, y))
        self._channels_last_op(op, conv)

    def _pool(self, op, kind: str) -> None:
        a = op.attributes
        kernel = list(a["kernel_shape"])
        n = len(kernel)
        self._check_rank(op.inputs[0], n + 2, f"its kernel_shape has {n} entries")
        strides = list(a["strides"] or [1] * n)
        dilations = list(a.get("dilations") or [1] * n)
        dilated = any(d != 1 for d in dilations)
        effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        if len(op.outputs) > 1 and op.outputs[1]:
            raise self._unsupported("the Indices output of MaxPool is not supported",
                                    "use only the first output")
        ceil_mode = bool(a.get("ceil_mode") or 0)
        auto_pad = a["auto_pad"] or "NOTSET"
        pads = a["pads"]
        include_pad = bool(a.get("count_include_pad") or 0)

        @functools.lru_cache(maxsize=32)
        def geometry(sizes, dtype):
            """(TensorFlow padding mode, explicit padding or None, factor or None)."""
            if None in sizes:   # unknown extents: no ceil_mode overhang, no averages
                if ceil_mode:
                    raise ShapeError(f"{op.op_type} node '{op.name}': ceil_mode needs the "
                                     f"input's spatial extents; give the input a static "
                                     f"shape")
                window = None
                begin, end = resolve_pads(op.op_type, sizes, kernel, strides=strides,
                                          dilations=dilations, pads=pads, auto_pad=auto_pad)
                extra = (0,) * n
            else:
                window = window_geometry(op.op_type, sizes, kernel, strides=strides,
                                         dilations=dilations, pads=pads, auto_pad=auto_pad,
                                         ceil_mode=ceil_mode)
                begin, end, extra = window.pads_begin, window.pads_end, window.overhang
            padding = [(b, e + more) for b, e, more in zip(begin, end, extra)]
            mode, explicit = _tf_padding(sizes, effective, strides, padding)
            if mode == "SAME" and (dilated or (kind == "AVG" and include_pad)):
                # TensorFlow's SAME pooling excludes the padding, as max pooling and
                # count_include_pad=0 do; the other cases pad explicitly.
                mode, explicit = "VALID", [[0, 0]] + [list(p) for p in padding] + [[0, 0]]
            if kind == "MAX" or mode == "SAME" or explicit is None:
                return mode, explicit, None
            if window is None:
                raise ShapeError(f"{op.op_type} node '{op.name}': average pooling with "
                                 f"padding needs the input's spatial extents; give the "
                                 f"input a static shape")
            return mode, explicit, _average_factor(window, include_pad, dtype)

        if kind == "MAX":
            def pool(x):
                mode, explicit, _ = geometry(tuple(x.shape[1:-1]), None)
                if explicit is not None:
                    x = tf.pad(x, explicit, constant_values=_tf_dtype(x).min)
                if dilated:
                    return _pool_by_slices(x, kernel, strides, dilations, kind)
                return tf.nn.max_pool(x, kernel, strides, mode)
        else:
            def pool(x):
                mode, explicit, factor = geometry(tuple(x.shape[1:-1]),
                                                  _tf_dtype(x).as_numpy_dtype)
                if explicit is not None:
                    x = tf.pad(x, explicit)
                if dilated:
                    y = _pool_by_slices(x, kernel, strides, dilations, kind) / math.prod(
                        kernel)
                else:
                    y = tf.nn.avg_pool(x, kernel, strides, mode)
                return y if factor is None else y * factor
        self._channels_last_op(op, pool)

    def visit_maxpool(self, op, network) -> None:
        """MaxPool: https://onnx.ai/onnx/operators/onnx__MaxPool.html"""
        self._pool(op, "MAX")

    def visit_averagepool(self, op, network) -> None:
        """AveragePool: https://onnx.ai/onnx/operators/onnx__AveragePool.html"""
        self._pool(op, "AVG")

    def _global_pool(self, op, reduce) -> None:
        self._channels_last_op(
            op, lambda x: reduce(x, axis=list(range(1, len(x.shape) - 1)), keepdims=True))

    def visit_globalaveragepool(self, op, network) -> None:
        """GlobalAveragePool: mean over all spatial axes, kept as size 1."""
        self._global_pool(op, tf.reduce_mean)

    def visit_globalmaxpool(self, op, network) -> None:
        """GlobalMaxPool: max over all spatial axes, kept as size 1."""
        self._global_pool(op, tf.reduce_max)

    def visit_gemm(self, op, network) -> None:
        """Gemm: Y = alpha·A'·B' + beta·C, A' = transpose(A) if transA, B' likewise."""
        a = op.attributes
        alpha, beta = float(a["alpha"]), float(a["beta"])
        trans_a, trans_b = bool(a["transA"]), bool(a["transB"])
        x_name, w_name = op.inputs[0], op.inputs[1]
        if x_name in self.flattened:
            # The flattened input is channels-last; the weight is stored to match.
            channels, spatial = self.flattened[x_name]
            self._store_parameter(w_name, ParameterLayout.flattened_channels_last(
                self._stored_shape(w_name), channels, spatial, trans_b))
            x_key, trans_b = x_name + FLAT, False
        else:
            x_key = self.key(x_name)
            if trans_b and self._only_consumed_as(w_name, lambda use, index: (
                    use.op_type == "Gemm" and index == 1 and use.attributes["transB"]
                    and use.inputs[0] not in self.flattened)):
                self._store_parameter(w_name, ParameterLayout.transposed(
                    self._stored_shape(w_name)))
                trans_b = False

        def gemm(x, w, c=None):
            y = tf.linalg.matmul(x, w, transpose_a=trans_a, transpose_b=trans_b)
            if alpha != 1.0:
                y = y * alpha
            if c is None or beta == 0.0:
                return y
            if beta != 1.0:
                c = c * beta
            if len(c.shape) == 2 and c.shape[0] == 1 and c.shape[1] == y.shape[-1]:
                # A row: a bias. (Grappler mis-fuses MatMul(transpose_a) + Add of a row.)
                c = tf.reshape(c, [-1])
            if len(c.shape) == 1 and c.shape[0] == y.shape[-1]:
                return tf.nn.bias_add(y, c)
            return y + c
        self.emit(gemm, [x_key] + [self.key(n) for n in op.inputs[1:]], op.outputs[0], rank=2)

    def visit_matmul(self, op, network) -> None:
        """MatMul: NumPy matmul semantics (1-D operands promoted, batch broadcasting)."""
        def matmul(x, y):
            rx, ry = len(x.shape), len(y.shape)
            if rx > 1 and ry > 1:
                return tf.linalg.matmul(x, y)
            z = tf.linalg.matmul(x[tf.newaxis] if rx == 1 else x,
                                 y[:, tf.newaxis] if ry == 1 else y)
            if ry == 1:
                z = tf.squeeze(z, -1)
            return tf.squeeze(z, -2 if ry > 1 else -1) if rx == 1 else z
        self.emit(matmul, [self.key(n) for n in op.inputs], op.outputs[0])
