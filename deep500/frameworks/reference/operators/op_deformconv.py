"""DeformConv (opset 19, 22): a convolution whose kernel taps sample X at learned
fractional offsets, each optionally scaled by a mask (Dai et al., Deformable
Convolutional Networks, 2017; Zhu et al., Deformable ConvNets v2, 2018).
https://onnx.ai/onnx/operators/onnx__DeformConv.html

Tap k of output position o reads X at p = o·strides - pads_begin + k·dilations +
offset[k, o] (offset (N, offset_group·K·n, *out): per offset group, per tap, one value
per spatial axis), interpolated (bi/multi-)linearly with zeros outside X, and multiplied by
mask[k, o] (N, offset_group·K, *out; default ones). Input channels are split into
``offset_group`` blocks sharing one offset and mask, and into ``group`` blocks convolved
with their own output channels, as Conv does. Any spatial rank; computed in float64.

Backward is exact wherever no sample lies on an integer coordinate (there the
interpolation weights have a kink): gradients w.r.t. X, W, offset, B and mask.
"""
import itertools

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("DeformConv")
class DeformConv(ReferenceOp):
    defaults = {"dilations": None, "group": 1, "kernel_shape": None, "offset_group": 1,
                "pads": None, "strides": None}

    def _geometry(self, X, W, offset, mask):
        """Checked shapes: (spatial rank, kernel shape, output shape, tap positions
        without offsets (n, K, O))."""
        if X.ndim < 3 or W.ndim != X.ndim:
            raise ShapeError(f"{self.op_type}: X (N, C, *spatial) and W (oC, C/group, "
                             f"*kernel) must have one rank >= 3, got {X.shape} and {W.shape}")
        n = X.ndim - 2
        kernel = tuple(W.shape[2:])
        given = self.attr("kernel_shape")
        if given is not None and tuple(int(k) for k in given) != kernel:
            raise ShapeError(f"{self.op_type}: kernel_shape {list(given)} differs from W's "
                             f"{list(kernel)}")
        strides = list(self.attr("strides") or [1] * n)
        dilations = list(self.attr("dilations") or [1] * n)
        pads = list(self.attr("pads") or [0] * (2 * n))
        if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
            raise ShapeError(f"{self.op_type}: strides, dilations ({n} values) and pads "
                             f"({2 * n}) must match the {n} spatial axes")
        group, offset_group = int(self.attr("group")), int(self.attr("offset_group"))
        channels = X.shape[1]
        if channels != W.shape[1] * group or W.shape[0] % group:
            raise ShapeError(f"{self.op_type}: X has {channels} channels and W shape "
                             f"{W.shape}; with group={group} X needs W.shape[1]·group "
                             f"channels and oC must be divisible by group")
        if channels % offset_group:
            raise ShapeError(f"{self.op_type}: {channels} channels are not divisible by "
                             f"offset_group={offset_group}")
        out = tuple((X.shape[2 + d] + pads[d] + pads[n + d] - (kernel[d] - 1) * dilations[d]
                     - 1) // strides[d] + 1 for d in range(n))
        taps = int(np.prod(kernel))
        want = (X.shape[0], offset_group * taps * n) + out
        if offset.shape != want:
            raise ShapeError(f"{self.op_type}: offset must have shape {want} (N, "
                             f"offset_group·kernel taps·{n}, *output), got {offset.shape}")
        if mask is not None and mask.shape != want[:1] + (offset_group * taps,) + out:
            raise ShapeError(f"{self.op_type}: mask must have shape "
                             f"{want[:1] + (offset_group * taps,) + out}, got {mask.shape}")
        tap = np.indices(kernel).reshape(n, -1)
        pos = np.indices(out).reshape(n, -1)
        base = np.stack([tap[d][:, None] * dilations[d] + pos[d][None] * strides[d] - pads[d]
                         for d in range(n)])
        return n, kernel, out, base

    def _samples(self, X, offset, base, n):
        """Per corner of the interpolation cell: (flat pixel index, weight, per-axis
        weights, per-axis corner bit), each (N, offset_group, K, O); weights are 0 for
        corners outside X."""
        N, og = X.shape[0], int(self.attr("offset_group"))
        K, O = base.shape[1], base.shape[2]
        p = offset.reshape(N, og, K, n, O).astype(np.float64) + base.transpose(1, 0, 2)
        low = np.floor(p)
        frac = p - low
        low = low.astype(np.int64)
        spatial = X.shape[2:]
        corners = []
        for bits in itertools.product((0, 1), repeat=n):
            index = np.zeros((N, og, K, O), np.int64)
            inside = np.ones((N, og, K, O), bool)
            axis_weights = []
            for d, bit in enumerate(bits):
                i = low[:, :, :, d] + bit
                inside &= (i >= 0) & (i < spatial[d])
                index = index * spatial[d] + np.clip(i, 0, spatial[d] - 1)
                axis_weights.append(frac[:, :, :, d] if bit else 1.0 - frac[:, :, :, d])
            weight = np.where(inside, np.prod(axis_weights, axis=0), 0.0)
            corners.append((index, weight, axis_weights, bits, inside))
        return corners

    def _columns(self, X, corners):
        """Interpolated samples (N, offset_group, C/offset_group, K, O), before the mask."""
        N, C = X.shape[:2]
        og = int(self.attr("offset_group"))
        image = X.reshape(N, og, C // og, -1).astype(np.float64)
        K, O = corners[0][0].shape[2:]
        cols = 0.0
        for index, weight, _, _, _ in corners:
            taken = np.take_along_axis(image, index.reshape(N, og, 1, K * O), axis=3)
            cols = cols + taken.reshape(N, og, C // og, K, O) * weight[:, :, None]
        return cols

    def _mask(self, mask, N, K, O):
        og = int(self.attr("offset_group"))
        if mask is None:
            return np.ones((N, og, 1, K, O))
        return np.asarray(mask, np.float64).reshape(N, og, 1, K, O)

    def forward(self, X, W, offset, B=None, mask=None):
        X, W, offset = np.asarray(X), np.asarray(W), np.asarray(offset)
        mask = None if mask is None else np.asarray(mask)
        n, kernel, out, base = self._geometry(X, W, offset, mask)
        N, C = X.shape[:2]
        K, O = base.shape[1:]
        cols = self._columns(X, self._samples(X, offset, base, n)) * self._mask(mask, N, K, O)
        group = int(self.attr("group"))
        cols = cols.reshape(N, group, (C // group) * K, O)
        weights = W.astype(np.float64).reshape(group, W.shape[0] // group, -1)
        Y = np.einsum("gaj,ngjo->ngao", weights, cols).reshape((N, W.shape[0]) + out)
        if B is not None:
            Y = Y + np.asarray(B, np.float64).reshape((1, -1) + (1,) * n)
        return Y.astype(X.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, W, offset = (np.asarray(x) for x in fwd_inputs[:3])
        B = fwd_inputs[3] if len(fwd_inputs) > 3 else None
        mask = fwd_inputs[4] if len(fwd_inputs) > 4 else None
        mask = None if mask is None else np.asarray(mask)
        n, kernel, out, base = self._geometry(X, W, offset, mask)
        N, C = X.shape[:2]
        K, O = base.shape[1:]
        og, group = int(self.attr("offset_group")), int(self.attr("group"))
        dY = (np.zeros((N, W.shape[0], O)) if grads[0] is None
              else np.asarray(grads[0], np.float64).reshape(N, W.shape[0], O))
        corners = self._samples(X, offset, base, n)
        sampled = self._columns(X, corners)                     # (N, og, C/og, K, O)
        scale = self._mask(mask, N, K, O)
        weights = W.astype(np.float64).reshape(group, W.shape[0] // group, -1)
        dY_g = dY.reshape(N, group, W.shape[0] // group, O)
        cols = (sampled * scale).reshape(N, group, (C // group) * K, O)
        dW = np.einsum("ngao,ngjo->gaj", dY_g, cols).reshape(W.shape)
        d_cols = np.einsum("gaj,ngao->ngjo", weights, dY_g).reshape(N, og, C // og, K, O)
        d_sampled = d_cols * scale
        image = X.reshape(N, og, C // og, -1).astype(np.float64)
        d_image = np.zeros_like(image)
        d_pos = np.zeros((N, og, K, n, O))
        batch, block, channel = np.indices((N, og, C // og))
        for index, weight, axis_weights, bits, inside in corners:
            flat = index.reshape(N, og, 1, K * O)
            np.add.at(d_image, (batch[..., None], block[..., None], channel[..., None],
                                np.broadcast_to(flat, (N, og, C // og, K * O))),
                      (d_sampled * weight[:, :, None]).reshape(N, og, C // og, K * O))
            # d(sample)/d(position_d) per channel, summed against its upstream gradient
            corner = (np.take_along_axis(image, flat, axis=3).reshape(N, og, C // og, K, O)
                      * d_sampled).sum(axis=2) * inside
            for d in range(n):
                others = np.prod([w for e, w in enumerate(axis_weights) if e != d], axis=0)
                d_pos[:, :, :, d] += corner * (others if bits[d] else -others)
        dX = d_image.reshape(X.shape).astype(X.dtype)
        d_offset = d_pos.reshape(offset.shape).astype(offset.dtype)
        result = [dX, dW.astype(W.dtype), d_offset]
        if len(fwd_inputs) > 3:
            result.append(None if B is None else
                          dY.sum(axis=(0, 2)).astype(np.asarray(B).dtype))
        if len(fwd_inputs) > 4:
            result.append(None if mask is None else
                          (d_cols * sampled).sum(axis=2).reshape(mask.shape).astype(
                              mask.dtype))
        return result
