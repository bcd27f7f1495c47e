"""RoiAlign (opset 10, 16, 22): pool each region of interest of X (N, C, H, W) to
(output_height, output_width) bins, each the average (mode "avg") or maximum ("max") of
a grid of bilinearly interpolated samples (He et al., Mask R-CNN, 2017).
https://onnx.ai/onnx/operators/onnx__RoiAlign.html

rois (R, 4) holds (x1, y1, x2, y2) in input coordinates scaled by ``spatial_scale``;
"half_pixel" shifts them by -0.5, "output_half_pixel" (opset 10's only behaviour, used
when the attribute is absent) does not but makes every region at least 1x1. Each bin has
``sampling_ratio`` (or ceil(region size / bins)) samples per axis; a sample further than
one pixel outside the image reads 0, one less far reads the clamped border. "max" takes
the largest of the four weighted corner values of every sample, as the ONNX reference
and onnxruntime do.

Since a sample's validity and weights factor into a row part and a column part, the
average of one region is Wy · X[b, c] · Wxᵀ / count with per-region interpolation
matrices Wy (bins × H) and Wx (bins × W); the backward pass is their transpose. Max mode
passes the gradient to the input pixel of the selected weighted corner. rois and
batch_indices get no gradient: proposals are taken as given (as torchvision does).
"""
import math

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _axis_samples(start: float, size: float, bins: int, grid: int, length: int):
    """Sample corners along one axis: (low index, high index, weight of low, weight of
    high), each (bins, grid); invalid samples have weights 0 and indices 0."""
    bin_size = size / bins
    pos = (start + np.arange(bins)[:, None] * bin_size
           + (np.arange(grid)[None, :] + 0.5) * bin_size / grid)
    valid = (pos >= -1.0) & (pos <= length)
    pos = np.maximum(pos, 0.0)
    low = np.floor(pos).astype(np.int64)
    at_end = low >= length - 1
    low = np.where(at_end, length - 1, low)
    high = np.where(at_end, length - 1, low + 1)
    frac = np.where(at_end, 0.0, pos - low)
    return (np.where(valid, low, 0), np.where(valid, high, 0),
            np.where(valid, 1.0 - frac, 0.0), np.where(valid, frac, 0.0))


@register("RoiAlign")
class RoiAlign(ReferenceOp):
    defaults = {"coordinate_transformation_mode": None, "mode": "avg", "output_height": 1,
                "output_width": 1, "sampling_ratio": 0, "spatial_scale": 1.0}

    def _check(self, X, rois, batch_indices):
        if X.ndim != 4:
            raise ShapeError(f"{self.op_type}: X must be (N, C, H, W), got shape {X.shape}")
        if rois.ndim != 2 or rois.shape[1] != 4:
            raise ShapeError(f"{self.op_type}: rois must be (num_rois, 4), got shape "
                             f"{rois.shape}")
        if batch_indices.shape != (rois.shape[0],):
            raise ShapeError(f"{self.op_type}: batch_indices must be ({rois.shape[0]},), one "
                             f"per roi, got shape {batch_indices.shape}")
        if batch_indices.size and (batch_indices.min() < 0
                                   or batch_indices.max() >= X.shape[0]):
            raise ShapeError(f"{self.op_type}: batch_indices {batch_indices.tolist()} must "
                             f"lie in [0, {X.shape[0]})")
        mode = _text(self.attr("mode"))
        if mode not in ("avg", "max"):
            raise ShapeError(f"{self.op_type}: mode must be 'avg' or 'max', got {mode!r}")
        coordinates = _text(self.attr("coordinate_transformation_mode")) or "output_half_pixel"
        if coordinates not in ("half_pixel", "output_half_pixel"):
            raise ShapeError(f"{self.op_type}: coordinate_transformation_mode must be "
                             f"'half_pixel' or 'output_half_pixel', got {coordinates!r}")
        return mode, coordinates == "half_pixel"

    def _regions(self, X, rois, batch_indices):
        """Per roi: (batch index, (row samples), (column samples), sample count)."""
        mode, half_pixel = self._check(X, rois, batch_indices)
        bins_h, bins_w = int(self.attr("output_height")), int(self.attr("output_width"))
        ratio, scale = int(self.attr("sampling_ratio")), float(self.attr("spatial_scale"))
        offset = 0.5 if half_pixel else 0.0
        for roi, b in zip(np.asarray(rois, np.float64), batch_indices):
            x1, y1, x2, y2 = roi * scale - offset
            height, width = y2 - y1, x2 - x1
            if not half_pixel:
                height, width = max(height, 1.0), max(width, 1.0)
            grid_h = ratio if ratio > 0 else int(math.ceil(height / bins_h))
            grid_w = ratio if ratio > 0 else int(math.ceil(width / bins_w))
            yield (int(b), _axis_samples(y1, height, bins_h, grid_h, X.shape[2]),
                   _axis_samples(x1, width, bins_w, grid_w, X.shape[3]),
                   max(grid_h * grid_w, 1))

    @staticmethod
    def _matrix(samples, length: int) -> np.ndarray:
        """(bins, length): the sum over a bin's samples of their interpolation weights."""
        low, high, w_low, w_high = samples
        matrix = np.zeros((low.shape[0], length))
        rows = np.broadcast_to(np.arange(low.shape[0])[:, None], low.shape)
        np.add.at(matrix, (rows, low), w_low)
        np.add.at(matrix, (rows, high), w_high)
        return matrix

    @staticmethod
    def _corners(samples):
        """Indices and weights of a sample's two corners along one axis: (bins, grid, 2)."""
        low, high, w_low, w_high = samples
        return np.stack([low, high], -1), np.stack([w_low, w_high], -1)

    def _weighted_corners(self, image, rows, cols):
        """(C, bins_h, bins_w, grid_h·2·grid_w·2): every sample's weighted corner values,
        and the matching flat pixel indices (bins_h, bins_w, ...)."""
        (iy, wy), (ix, wx) = self._corners(rows), self._corners(cols)
        # axes: c, bin_h, grid_h, corner_h, bin_w, grid_w, corner_w
        weights = wy[:, :, :, None, None, None] * wx[None, None, None]
        values = weights * image[:, iy[:, :, :, None, None, None], ix[None, None, None]]
        flat = iy[:, :, :, None, None, None] * image.shape[2] + ix[None, None, None]
        values = values.transpose(0, 1, 4, 2, 3, 5, 6)
        flat = flat.transpose(0, 3, 1, 2, 4, 5)
        return (values.reshape(values.shape[:3] + (-1,)),
                flat.reshape(flat.shape[:2] + (-1,)))

    def forward(self, X, rois, batch_indices):
        X, rois, batch_indices = np.asarray(X), np.asarray(rois), np.asarray(batch_indices)
        mode, _ = self._check(X, rois, batch_indices)
        Y = np.zeros((rois.shape[0], X.shape[1], int(self.attr("output_height")),
                      int(self.attr("output_width"))))
        for r, (b, rows, cols, count) in enumerate(self._regions(X, rois, batch_indices)):
            image = X[b].astype(np.float64)
            if rows[0].shape[1] == 0 or cols[0].shape[1] == 0:
                continue   # an empty region (half_pixel, zero size): no samples, 0
            if mode == "avg":
                Wy, Wx = self._matrix(rows, X.shape[2]), self._matrix(cols, X.shape[3])
                Y[r] = Wy @ image @ Wx.T / count
            else:
                Y[r] = self._weighted_corners(image, rows, cols)[0].max(-1)
        return Y.astype(X.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, rois, batch_indices = (np.asarray(x) for x in fwd_inputs)
        mode, _ = self._check(X, rois, batch_indices)
        dX = np.zeros(X.shape)
        if grads[0] is not None:
            dY = np.asarray(grads[0], np.float64)
            for r, (b, rows, cols, count) in enumerate(self._regions(X, rois, batch_indices)):
                if rows[0].shape[1] == 0 or cols[0].shape[1] == 0:
                    continue
                if mode == "avg":
                    Wy, Wx = self._matrix(rows, X.shape[2]), self._matrix(cols, X.shape[3])
                    dX[b] += Wy.T @ dY[r] @ Wx / count
                    continue
                values, flat = self._weighted_corners(X[b].astype(np.float64), rows, cols)
                (iy, wy), (ix, wx) = self._corners(rows), self._corners(cols)
                weights = (wy[:, :, :, None, None, None] * wx[None, None, None]).transpose(
                    0, 3, 1, 2, 4, 5).reshape(flat.shape)
                pick = values.argmax(-1)   # (C, bins_h, bins_w): the first maximum
                bins = np.indices(pick.shape[1:])
                pixel = flat[bins[0], bins[1], pick]
                weight = weights[bins[0], bins[1], pick]
                channels = np.broadcast_to(np.arange(X.shape[1])[:, None, None], pick.shape)
                plane = dX[b].reshape(X.shape[1], -1)
                np.add.at(plane, (channels, pixel), dY[r] * weight)
        return [dX.astype(X.dtype), None, None]
