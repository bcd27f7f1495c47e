"""TensorFlowVisitor methods for window operators beyond the visitor's convolution and
pooling (ConvTranspose, DeformConv, LpPool): https://onnx.ai/onnx/operators/."""
from __future__ import annotations

import dataclasses
import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.seq_common import NodeOps, _like, _text
from deep500.utils.errors import UnsupportedError


class WindowOps(NodeOps):
    """``visit_<op>`` methods of the window operators."""

    # -- windows: transposed convolution, Lp pooling ---------------------------------
    def visit_convtranspose(self, op, network) -> None:
        """ConvTranspose: https://onnx.ai/onnx/operators/onnx__ConvTranspose.html (1-D,
        2-D, 3-D; strides, dilations, group, pads, auto_pad, output_padding,
        output_shape). TensorFlow's channels-last transposed convolution computes the
        uncropped output of a zero-dilated filter, one call per group; the ONNX
        geometry (``conv_transpose_geometry``) then crops or zero-extends it."""
        from deep500.utils.onnx_interop.window import conv_transpose_geometry
        a = op.attributes
        w_rank = self.rank(op.inputs[1]) or self.rank(op.inputs[0])
        if w_rank is not None and w_rank - 2 not in (1, 2, 3):
            raise self._unsupported(f"{w_rank - 2}-D transposed convolutions are not "
                                    f"supported (1-D, 2-D and 3-D are)")
        group = int(a.get("group") or 1)

        def conv_transpose(x, w, b=None):   # x channels-last: (N, d..., C)
            spatial = len(x.shape) - 2
            channels = x.shape[-1]
            if len(w.shape) != spatial + 2 or w.shape[0] != channels or channels % group:
                raise self._node_error(op, f"W of shape {list(w.shape)} does not fit X with "
                                       f"{channels} channels, {spatial} spatial axes and "
                                       f"group={group}: W must be (C, M/group, k...)")
            kernel = tuple(w.shape[2:])
            if a.get("kernel_shape") is not None and tuple(a["kernel_shape"]) != kernel:
                raise self._node_error(op, f"kernel_shape={list(a['kernel_shape'])} does not "
                                       f"match W's spatial shape {list(kernel)}")
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
            filt = _dilate(tf.transpose(_like(w, x), list(range(2, spatial + 2)) + [1, 0]),
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
                raise self._node_error(op, f"only 2-D deformable convolutions are "
                                           f"supported; X has shape {list(x.shape)}",
                                       UnsupportedError)
            n, c, height, width = x.shape
            out_c, kh, kw = w.shape[0], w.shape[2], w.shape[3]
            oh, ow = offset.shape[2], offset.shape[3]
            if c != w.shape[1] * group or out_c % group or c % offset_group or \
                    offset.shape[1] != offset_group * kh * kw * 2:
                raise self._node_error(op, f"X {list(x.shape)}, W {list(w.shape)} and offset "
                                           f"{list(offset.shape)} do not fit group={group} "
                                           f"and offset_group={offset_group}")
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

    def visit_lppool(self, op, network) -> None:
        """LpPool: (Σ |x|^p over each window)^(1/p), zero padding:
        https://onnx.ai/onnx/operators/onnx__LpPool.html (strides, dilations, pads,
        auto_pad, ceil_mode). Windows are sums of strided slices, one per kernel tap."""
        from deep500.utils.onnx_interop.window import window_geometry
        a = op.attributes
        p = float(a["p"] if a.get("p") is not None else 2)
        kernel = list(a["kernel_shape"])

        def lp_pool(x):
            spatial = len(x.shape) - 2
            if spatial != len(kernel):
                raise self._node_error(op, f"kernel_shape {kernel} has {len(kernel)} entries "
                                       f"but X has {spatial} spatial axes")
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


def _dilate(w, dilations):
    """A (k1, ..., kn, ...) filter with dilation - 1 zeros between its taps along each
    of its first axes, so that an undilated operation computes the dilated one."""
    for axis, rate in enumerate(dilations):
        if rate == 1:
            continue
        taps = w.shape[axis]
        spaced = tf.concat([tf.expand_dims(w, axis + 1)] + [
            tf.zeros_like(tf.expand_dims(w, axis + 1))] * (rate - 1), axis + 1)
        shape = list(w.shape)
        shape[axis] = taps * rate
        w = tf.reshape(spaced, shape)[(slice(None),) * axis + (slice(0, rate * (taps - 1) + 1),)]
    return w
