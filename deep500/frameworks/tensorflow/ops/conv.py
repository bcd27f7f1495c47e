"""TensorFlowVisitor: the conv family (``deep500/frameworks/families.py``), convolutions
and their inverses: https://onnx.ai/onnx/operators/onnx__Conv.html,
.../onnx__ConvTranspose.html, .../onnx__DeformConv.html, .../onnx__Col2Im.html. Conv and
ConvTranspose compute in channels-last (window geometry from
``deep500.utils.onnx_interop.window``); a Conv weight read only by convolutions is
stored as (k..., I, O) (``ParameterLayout.filter``).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from deep500.frameworks.tensorflow._layout import ParameterLayout
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _text
from deep500.frameworks.tensorflow.ops._padding import _tf_padding
from deep500.frameworks.tensorflow.ops._values import _like, _required_ints, _shape_list
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from deep500.utils.onnx_interop.window import (conv_transpose_geometry, resolve_pads,
                                               window_geometry)


def _dilate_filter(w, dilations):
    """A (k1, ..., kn, ...) filter with dilation - 1 zeros between the taps of its first
    n axes, so that an undilated convolution computes the dilated one (TensorFlow's CPU
    kernels have no gradients for dilations > 1)."""
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


class ConvOps:
    """``visit_<op>`` of the conv family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_conv(self, op, network) -> None:
        """Conv: https://onnx.ai/onnx/operators/onnx__Conv.html"""
        a = op.attributes
        w_rank = self.rank(op.inputs[1]) or self.rank(op.inputs[0])
        if w_rank is None:
            raise self.node_error(op, "the rank of the convolution is unknown; give the "
                                      "weight or input tensor a static shape")
        spatial = w_rank - 2
        if spatial not in (1, 2, 3):
            raise self.node_error(op, f"{spatial}-D convolutions are not supported "
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

    def visit_convtranspose(self, op, network) -> None:
        """ConvTranspose: https://onnx.ai/onnx/operators/onnx__ConvTranspose.html (1-D,
        2-D, 3-D; strides, dilations, group, pads, auto_pad, output_padding,
        output_shape). TensorFlow's channels-last transposed convolution computes the
        uncropped output of a zero-dilated filter, one call per group; the ONNX
        geometry (``conv_transpose_geometry``) then crops or zero-extends it."""
        a = op.attributes
        w_rank = self.rank(op.inputs[1]) or self.rank(op.inputs[0])
        if w_rank is not None and w_rank - 2 not in (1, 2, 3):
            raise self.node_error(op, f"{w_rank - 2}-D transposed convolutions are not "
                                      f"supported (1-D, 2-D and 3-D are)")
        group = int(a.get("group") or 1)

        def conv_transpose(x, w, b=None):   # x channels-last: (N, d..., C)
            spatial = len(x.shape) - 2
            channels = x.shape[-1]
            if len(w.shape) != spatial + 2 or w.shape[0] != channels or channels % group:
                raise self.node_error(op, f"W of shape {list(w.shape)} does not fit X with "
                                      f"{channels} channels, {spatial} spatial axes and "
                                      f"group={group}: W must be (C, M/group, k...)",
                                      ShapeError)
            kernel = tuple(w.shape[2:])
            if a.get("kernel_shape") is not None and tuple(a["kernel_shape"]) != kernel:
                raise self.node_error(op, f"kernel_shape={list(a['kernel_shape'])} does not "
                                      f"match W's spatial shape {list(kernel)}", ShapeError)
            auto_pad = _text(a.get("auto_pad"), "NOTSET")
            wanted = a.get("output_shape")
            g = conv_transpose_geometry(op.op_type, x.shape[1:-1], kernel,
                                        strides=a.get("strides"), dilations=a.get("dilations"),
                                        pads=None if wanted else a.get("pads"),
                                        auto_pad="NOTSET" if wanted else auto_pad,
                                        output_padding=a.get("output_padding"))
            if wanted:
                # The spec's implicit padding; an output_shape beyond the uncropped
                # output makes it negative: zeros are appended.
                target = [int(v) for v in wanted][-spatial:]
                totals = [f - t for f, t in zip(g.full, target)]
                begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals]
                g = dataclasses.replace(g, pads_begin=tuple(begin), pads_end=tuple(
                    t - b for t, b in zip(totals, begin)), output=tuple(target))
            # (k..., M/group, C): TensorFlow's filter of a transposed convolution.
            filt = _dilate_filter(tf.transpose(_like(w, x),
                                               list(range(2, spatial + 2)) + [1, 0]),
                                  g.dilations)
            extents = filt.shape[:spatial]
            base = [(n - 1) * s + e for n, s, e in zip(g.input, g.strides, extents)]
            batch = tf.shape(x)[0]
            per_group = w.shape[1]
            xs = tf.split(x, group, axis=-1) if group > 1 else [x]
            fs = tf.split(filt, group, axis=-1) if group > 1 else [filt]
            ys = []
            for xg, fg in zip(xs, fs):
                if spatial == 1:
                    y = tf.nn.conv2d_transpose(
                        xg[:, tf.newaxis], fg[tf.newaxis],
                        tf.stack([batch, 1, base[0], per_group]), [1, 1, g.strides[0], 1],
                        "VALID")[:, 0]
                elif spatial == 2:
                    y = tf.nn.conv2d_transpose(xg, fg, tf.stack([batch, *base, per_group]),
                                               [1, *g.strides, 1], "VALID")
                else:
                    y = tf.nn.conv3d_transpose(xg, fg, tf.stack([batch, *base, per_group]),
                                               [1, *g.strides, 1], "VALID")
                ys.append(y)
            y = tf.concat(ys, -1) if group > 1 else ys[0]
            # base + output_padding = full; then crop pads_begin/pads_end (negative
            # pads add zeros).
            pads = [[0, 0]]
            for n, begin, o in zip(base, g.pads_begin, g.output):
                pads.append([max(0, -begin), max(0, begin + o - n)])
            pads.append([0, 0])
            if any(p != [0, 0] for p in pads):
                y = tf.pad(y, pads)
            y = y[(slice(None),) + tuple(slice(max(begin, 0), max(begin, 0) + o)
                                         for begin, o in zip(g.pads_begin, g.output))]
            return y if b is None else tf.nn.bias_add(y, _like(b, y))
        self._channels_last_op(op, conv_transpose)

    def visit_deformconv(self, op, network) -> None:
        """DeformConv (Dai et al., https://arxiv.org/abs/1703.06211; modulated by a mask,
        Zhu et al., https://arxiv.org/abs/1811.11168), 2-D:
        https://onnx.ai/onnx/operators/onnx__DeformConv.html — every kernel tap reads X
        bilinearly (zero outside) at its position plus a learned offset, per offset
        group, times the mask; then a grouped convolution of these columns.
        Differentiable in X, W, offset, B and mask."""
        a = op.attributes
        group = int(a.get("group") or 1)
        offset_group = int(a.get("offset_group") or 1)

        def deform_conv(x, w, offset, b=None, mask=None):
            if len(x.shape) != 4:
                raise self.node_error(op, f"only 2-D deformable convolutions are "
                                          f"supported; X has shape {list(x.shape)}",
                                      UnsupportedError)
            n, c, height, width = x.shape
            out_c, kh, kw = w.shape[0], w.shape[2], w.shape[3]
            oh, ow = offset.shape[2], offset.shape[3]
            if c != w.shape[1] * group or out_c % group or c % offset_group or \
                    offset.shape[1] != offset_group * kh * kw * 2:
                raise self.node_error(op, f"X {list(x.shape)}, W {list(w.shape)} and offset "
                                          f"{list(offset.shape)} do not fit group={group} "
                                          f"and offset_group={offset_group}", ShapeError)
            strides = list(a.get("strides") or [1, 1])
            dilations = list(a.get("dilations") or [1, 1])
            pads = list(a.get("pads") or [0, 0, 0, 0])
            offset = tf.reshape(_like(offset, x), [n, offset_group, kh, kw, 2, oh, ow])
            base_y = (np.arange(kh)[:, None] * dilations[0] + np.arange(oh)[None, :]
                      * strides[0] - pads[0])                                 # (kh, oh)
            base_x = (np.arange(kw)[:, None] * dilations[1] + np.arange(ow)[None, :]
                      * strides[1] - pads[1])                                 # (kw, ow)
            y = offset[:, :, :, :, 0] + tf.constant(
                base_y[:, None, :, None].astype(x.dtype.as_numpy_dtype))    # (n,g,kh,kw,oh,ow)
            xs = offset[:, :, :, :, 1] + tf.constant(
                base_x[None, :, None, :].astype(x.dtype.as_numpy_dtype))
            y0, x0 = tf.stop_gradient(tf.floor(y)), tf.stop_gradient(tf.floor(xs))
            ly, lx = y - y0, xs - x0
            grouped = tf.reshape(x, [n, offset_group, c // offset_group, height * width])
            columns = None
            for dy, wy in ((0, 1 - ly), (1, ly)):
                for dx, wx in ((0, 1 - lx), (1, lx)):
                    yc, xc = y0 + dy, x0 + dx
                    valid = (yc >= 0) & (yc <= height - 1) & (xc >= 0) & (xc <= width - 1)
                    index = tf.cast(tf.clip_by_value(yc, 0, height - 1) * width
                                    + tf.clip_by_value(xc, 0, width - 1), tf.int32)
                    values = tf.gather(grouped, tf.reshape(index, [n, offset_group, -1]),
                                       axis=3, batch_dims=2)          # (n, g, c/g, L)
                    values = tf.reshape(values, [n, offset_group, c // offset_group, kh, kw,
                                                 oh, ow])
                    weight = tf.where(valid, wy * wx, tf.zeros_like(wy))
                    term = values * weight[:, :, tf.newaxis]
                    columns = term if columns is None else columns + term
            if mask is not None:
                columns = columns * tf.reshape(_like(mask, x), [n, offset_group, 1, kh, kw,
                                                                oh, ow])
            columns = tf.reshape(columns, [n, group, c // group, kh, kw, oh, ow])
            filters = tf.reshape(_like(w, x), [group, out_c // group, c // group, kh, kw])
            y_out = tf.reshape(tf.einsum("ngckluv,gockl->ngouv", columns, filters),
                               [n, out_c, oh, ow])
            return y_out if b is None else y_out + tf.reshape(_like(b, x), [1, -1, 1, 1])
        self._emit_node(op, deform_conv)

    def visit_causalconvwithstate(self, op, network) -> None:
        """CausalConvWithState (opset 27): a causal depthwise 1-D convolution carrying its
        last k-1 input positions between calls (Mamba, Gated DeltaNet decoding):
        https://onnx.ai/onnx/operators/onnx__CausalConvWithState.html. With P =
        concat(past_state (default zeros), input) along the length axis and weight
        (C, 1, k): output[b, c, t] = act(Σ_j weight[c, 0, j]·P[b, c, t + j] + bias[c]),
        act the identity ("none") or SiLU ("silu", "swish"); present_state holds the last
        k-1 positions of P. Summed over the k taps in at least float32."""
        activation = _text(op.attributes.get("activation"), "none")
        if activation not in ("none", "silu", "swish"):
            raise self.node_error(op, f"activation must be 'none', 'silu' or 'swish', got "
                                      f"{activation!r}", Deep500Error)

        def causal_conv(x, w, b=None, past=None):
            if len(x.shape) != 3 or len(w.shape) != 3 or tuple(w.shape[:2]) != (
                    x.shape[1], 1):
                raise self.node_error(op, f"input {list(x.shape)} must be (batch, channels, "
                                          f"length) and weight {list(w.shape)} (channels, "
                                          f"1, k)", ShapeError)
            work = tf.float64 if x.dtype == tf.float64 else tf.float32
            k, length = w.shape[2], x.shape[2]
            if past is None:
                past = tf.zeros(tf.stack([tf.shape(x)[0], x.shape[1], k - 1]), x.dtype)
            padded = tf.concat([_like(past, x), x], axis=2)
            wide, taps = tf.cast(padded, work), tf.cast(w[:, 0], work)
            y = tf.add_n([taps[tf.newaxis, :, j, tf.newaxis] * wide[:, :, j:j + length]
                          for j in range(k)])
            if b is not None:
                y = y + tf.cast(b, work)[tf.newaxis, :, tf.newaxis]
            if activation != "none":
                y = y * tf.sigmoid(y)
            present = padded[:, :, padded.shape[2] - (k - 1):]
            y = tf.cast(y, x.dtype)
            return (y, present) if len(op.outputs) > 1 else y
        self._emit_node(op, causal_conv)

    def visit_col2im(self, op, network) -> None:
        """Col2Im: column blocks (N, C·∏block_shape, L) summed back into an image (N, C,
        *image_shape) where they overlap: https://onnx.ai/onnx/operators/onnx__Col2Im.html
        (strides, dilations, pads). A segment sum over the flat padded image, whose
        indices are computed once per shape."""
        a = op.attributes

        def col2im(cols, image_shape, block_shape):
            image = _required_ints(image_shape, "image_shape", self, op)
            block = _required_ints(block_shape, "block_shape", self, op)
            if len(image) != len(block) or not image:
                raise self.node_error(op, f"image_shape {image} and block_shape {block} must "
                                      f"have the same, non-zero length", ShapeError)
            g = window_geometry(op.op_type, image, block, strides=a.get("strides"),
                                dilations=a.get("dilations"), pads=a.get("pads"))
            taps, blocks = math.prod(block), math.prod(g.output)
            if len(cols.shape) != 3 or cols.shape[1] % taps or cols.shape[2] != blocks:
                raise self.node_error(op, f"input of shape {list(cols.shape)} must be (N, "
                                      f"C·{taps}, {blocks}) for image_shape {image}, "
                                      f"block_shape {block} and these strides, dilations "
                                      f"and pads", ShapeError)
            padded = [n + b + e for n, b, e in zip(image, g.pads_begin, g.pads_end)]
            # Flat padded-image index of (tap, block): Σ (k·d + o·s) · row stride.
            index = np.zeros(tuple(block) + tuple(g.output), np.int64)
            stride = 1
            for axis in reversed(range(len(image))):
                k = np.arange(block[axis]) * g.dilations[axis]
                o = np.arange(g.output[axis]) * g.strides[axis]
                view_k = [1] * (2 * len(image))
                view_k[axis] = -1
                view_o = [1] * (2 * len(image))
                view_o[len(image) + axis] = -1
                index = index + (k.reshape(view_k) + o.reshape(view_o)) * stride
                stride *= padded[axis]
            batch, channels = tf.shape(cols)[0], cols.shape[1] // taps
            data = tf.transpose(tf.reshape(cols, [batch, channels, taps * blocks]), [2, 0, 1])
            summed = tf.math.unsorted_segment_sum(data, index.reshape(-1), stride)
            y = tf.reshape(tf.transpose(summed, [1, 2, 0]), tf.concat(
                [[batch, channels], padded], 0))
            return y[(slice(None), slice(None)) + tuple(
                slice(b, b + n) for b, n in zip(g.pads_begin, image))]
        self._emit_node(op, col2im, static=(1, 2))
