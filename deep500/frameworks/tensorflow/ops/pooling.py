"""TensorFlowVisitor: the pooling family (``deep500/frameworks/families.py``), pooling and
unpooling: https://onnx.ai/onnx/operators/onnx__MaxPool.html, .../onnx__AveragePool.html,
.../onnx__LpPool.html, .../onnx__MaxUnpool.html and the global poolings. MaxPool and
AveragePool compute in channels-last with TensorFlow's pooling kernels (window geometry
from ``deep500.utils.onnx_interop.window``); dilated windows are strided slices, one per
kernel tap.
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _text
from deep500.frameworks.tensorflow.ops._padding import _tf_padding
from deep500.frameworks.tensorflow.ops._values import (_required_ints, _shape_list,
                                                       _tf_dtype)
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.window import resolve_pads, window_counts, window_geometry


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


def _onnx_indices(argmax, shape, begin, sizes, column_major: bool):
    """MaxPool's Indices (https://onnx.ai/onnx/operators/onnx__MaxPool.html: the flat
    index into the (N, C, H, W) input, padding not counted; with ``storage_order`` 1 the
    spatial part column-major), as (N, C, OH, OW), from ``tf.nn.max_pool_with_argmax``'s
    flat index into the channels-last input of ``shape``, padded by ``begin`` rows and
    columns before."""
    channels, height, width = shape[3], shape[1], shape[2]
    argmax = tf.cast(argmax, tf.int64)
    c = argmax % channels
    rest = argmax // channels
    col = rest % width - begin[1]
    rest = rest // width
    row = rest % height - begin[0]
    batch = rest // height
    plane = (batch * channels + c) * sizes[0] * sizes[1]
    index = plane + (col * sizes[0] + row if column_major else row * sizes[1] + col)
    return tf.transpose(index, [0, 3, 1, 2])


class PoolingOps:
    """``visit_<op>`` of the pooling family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _pool(self, op, kind: str) -> None:
        """MaxPool (``kind`` 'MAX', with its Indices output for 2-D windows without
        dilations) or AveragePool ('AVG') of a channels-last input, with TensorFlow's
        pooling kernels, or one strided slice per kernel tap where the window is
        dilated."""
        a = op.attributes
        kernel = list(a["kernel_shape"])
        n = len(kernel)
        self._check_rank(op.inputs[0], n + 2, f"its kernel_shape has {n} entries")
        strides = list(a["strides"] or [1] * n)
        dilations = list(a.get("dilations") or [1] * n)
        dilated = any(d != 1 for d in dilations)
        indices = len(op.outputs) > 1 and bool(op.outputs[1])
        column_major = bool(a.get("storage_order") or 0)
        if indices and (n != 2 or dilated):
            raise self.node_error(op, "the Indices output of MaxPool is supported for 2-D "
                                      "windows without dilations; use only the first "
                                      "output")
        geometry = self._pool_geometry(op, kind, kernel, strides, dilations)

        if indices:
            def pool(x):   # TensorFlow's argmax, read as ONNX's index of (N, C, H, W)
                mode, explicit, _ = geometry(tuple(x.shape[1:-1]), None)
                sizes = _shape_list(x)[1:3]
                if explicit is not None:
                    x = tf.pad(x, explicit, constant_values=_tf_dtype(x).min)
                y, argmax = tf.nn.max_pool_with_argmax(x, kernel, strides, mode,
                                                       include_batch_in_index=True)
                begin = [0, 0] if explicit is None else [explicit[1][0], explicit[2][0]]
                return y, _onnx_indices(argmax, _shape_list(x), begin, sizes,
                                        column_major)
        elif kind == "MAX":
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
        self._channels_last_op(op, pool, 2 if indices else 1)

    def _pool_geometry(self, op, kind: str, kernel: list, strides: list, dilations: list):
        """``geometry(spatial extents, dtype) -> (TensorFlow padding mode, explicit
        padding or None, average factor or None)``, cached per input shape: the window
        placement of ``deep500.utils.onnx_interop.window`` (pads, auto_pad, ceil_mode's
        overhang) as TensorFlow's SAME or VALID, padding explicitly where TensorFlow's
        SAME would count differently, and for averages over padding the factor
        :func:`_average_factor` gives."""
        a = op.attributes
        n = len(kernel)
        dilated = any(d != 1 for d in dilations)
        effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        ceil_mode = bool(a.get("ceil_mode") or 0)
        auto_pad = a["auto_pad"] or "NOTSET"
        pads = a["pads"]
        include_pad = bool(a.get("count_include_pad") or 0)

        @functools.lru_cache(maxsize=32)
        def geometry(sizes, dtype):
            """(TensorFlow padding mode, explicit padding or None, factor or None)."""
            if None in sizes:   # unknown extents: no ceil_mode overhang, no averages
                if ceil_mode:
                    raise self.node_error(op, "ceil_mode needs the input's spatial extents; "
                                              "give the input a static shape", ShapeError)
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
                raise self.node_error(op, "average pooling with padding needs the input's "
                                          "spatial extents; give the input a static shape",
                                      ShapeError)
            return mode, explicit, _average_factor(window, include_pad, dtype)
        return geometry

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

    def visit_lppool(self, op, network) -> None:
        """LpPool: (Σ |x|^p over each window)^(1/p), zero padding:
        https://onnx.ai/onnx/operators/onnx__LpPool.html (strides, dilations, pads,
        auto_pad, ceil_mode). Windows are sums of strided slices, one per kernel tap."""
        a = op.attributes
        p = float(a["p"] if a.get("p") is not None else 2)
        kernel = list(a["kernel_shape"])

        def lp_pool(x):
            spatial = len(x.shape) - 2
            if spatial != len(kernel):
                raise self.node_error(op, f"kernel_shape {kernel} has {len(kernel)} entries "
                                      f"but X has {spatial} spatial axes", ShapeError)
            g = window_geometry(op.op_type, x.shape[2:], kernel, strides=a.get("strides"),
                                dilations=a.get("dilations"), pads=a.get("pads"),
                                auto_pad=_text(a.get("auto_pad"), "NOTSET"),
                                ceil_mode=bool(a.get("ceil_mode") or 0))
            powered = tf.abs(x) if p == 1 else (tf.square(x) if p == 2 else
                                                tf.pow(tf.abs(x), p))
            padded = tf.pad(powered, [[0, 0], [0, 0]] + [
                [b, e + more] for b, e, more in zip(g.pads_begin, g.pads_end, g.overhang)])
            total = None
            for taps in np.ndindex(*g.kernel):
                index = (slice(None), slice(None)) + tuple(
                    slice(k * d, k * d + (o - 1) * s + 1, s)
                    for k, d, o, s in zip(taps, g.dilations, g.output, g.strides))
                total = padded[index] if total is None else total + padded[index]
            if p == 1:
                return total
            return tf.sqrt(total) if p == 2 else tf.pow(total, 1 / p)
        self._emit_node(op, lp_pool)

    def visit_maxunpool(self, op, network) -> None:
        """MaxUnpool: X's values scattered to the flat positions I (from MaxPool's
        Indices) of a zero tensor of the inferred shape, placed at the start of
        ``output_shape`` when given: https://onnx.ai/onnx/operators/onnx__MaxUnpool.html"""
        a = op.attributes
        kernel = list(a["kernel_shape"])

        def max_unpool(x, indices, output_shape=None):
            rank = len(x.shape) - 2
            strides = list(a.get("strides") or [1] * rank)
            pads = list(a.get("pads") or [0] * (2 * rank))
            if len(kernel) != rank or len(strides) != rank or len(pads) != 2 * rank:
                raise self.node_error(op, f"kernel_shape {kernel}, strides {strides} and "
                                          f"pads {pads} do not fit X with {rank} spatial axes",
                                      ShapeError)
            inferred = list(x.shape[:2]) + [
                (n - 1) * s - (pads[i] + pads[i + rank]) + k
                for i, (n, s, k) in enumerate(zip(x.shape[2:], strides, kernel))]
            flat = tf.scatter_nd(tf.reshape(tf.cast(indices, tf.int64), [-1, 1]),
                                 tf.reshape(x, [-1]), [math.prod(inferred)])
            y = tf.reshape(flat, inferred)
            if output_shape is None:
                return y
            shape = _required_ints(output_shape, "output_shape", self, op)
            if len(shape) != len(inferred) or any(o < n for o, n in zip(shape, inferred)):
                raise self.node_error(op, f"output_shape {shape} must have rank "
                                          f"{len(inferred)} and be at least the inferred "
                                          f"shape {inferred} on every axis", ShapeError)
            return tf.pad(y, [[0, o - n] for o, n in zip(shape, inferred)])
        self._emit_node(op, max_unpool, static=(2,))
