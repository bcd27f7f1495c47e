"""The detection family in PyTorch: RoiAlign (bilinear samples pooled per bin) and
NonMaxSuppression (greedy, per batch and class).
https://onnx.ai/onnx/operators/onnx__RoiAlign.html
"""
from __future__ import annotations

import math

from deep500.frameworks.pytorch._torch_common import text
from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


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


def _roi_axis(start, size, pooled: int, grid: int, length: int):
    """Sample positions of one RoiAlign axis: (low, high, weight of low, weight of high)
    per sample (pooled · grid samples); samples outside [-1, length] weigh nothing, as
    onnx's reference and onnxruntime define them."""
    device, dtype = start.device, start.dtype
    bin_size = size / pooled
    offsets = (torch.arange(pooled, device=device, dtype=dtype).unsqueeze(1) * bin_size
               + (torch.arange(grid, device=device, dtype=dtype).unsqueeze(0) + 0.5)
               * bin_size / grid)
    position = (start + offsets).reshape(-1)
    outside = (position < -1) | (position > length)
    position = position.clamp(min=0)
    low = position.detach().floor().long()
    edge = low >= length - 1
    low = torch.where(edge, torch.full_like(low, length - 1), low)
    high = torch.where(edge, low, low + 1)
    position = torch.where(edge, low.to(dtype), position)
    upper = position - low.to(dtype)
    lower = 1 - upper
    zero = torch.zeros_like(upper)
    return low, high, torch.where(outside, zero, lower), torch.where(outside, zero, upper)


def roi_align(x, rois, batch_indices, *, mode="avg", output_height=1, output_width=1,
              sampling_ratio=0, spatial_scale=1.0, half_pixel=True):
    """ONNX RoiAlign (https://onnx.ai/onnx/operators/onnx__RoiAlign.html): each region
    (x1, y1, x2, y2) of ``rois`` (scaled by ``spatial_scale``, shifted by half a pixel
    in 'half_pixel' mode, at least 1 pixel wide otherwise) pooled to output_height ×
    output_width bins from a grid of bilinear samples per bin (sampling_ratio, or
    ceil(bin size)); 'avg' averages the samples, 'max' takes the largest weighted corner
    value of any sample, as onnxruntime."""
    height, width = x.shape[2], x.shape[3]
    rois = rois.to(x.dtype)
    offset = 0.5 if half_pixel else 0.0
    results = []
    for r, b in enumerate(batch_indices.tolist()):
        start_w, start_h, end_w, end_h = (rois[r] * spatial_scale - offset).unbind()
        roi_w, roi_h = end_w - start_w, end_h - start_h
        if not half_pixel:
            roi_w, roi_h = roi_w.clamp(min=1.0), roi_h.clamp(min=1.0)
        grid_h = sampling_ratio or max(int(math.ceil(roi_h.item() / output_height)), 0)
        grid_w = sampling_ratio or max(int(math.ceil(roi_w.item() / output_width)), 0)
        count = max(grid_h * grid_w, 1)
        if grid_h == 0 or grid_w == 0:   # an empty region: no samples, zeros
            results.append(x.new_zeros((x.shape[1], output_height, output_width)))
            continue
        y_low, y_high, hy, ly = _roi_axis(start_h, roi_h, output_height, grid_h, height)
        x_low, x_high, hx, lx = _roi_axis(start_w, roi_w, output_width, grid_w, width)
        image = x[int(b)]
        if mode == "avg":
            wy = image.new_zeros((len(y_low), height)).scatter_add(
                1, y_low.unsqueeze(1), hy.unsqueeze(1)).scatter_add(
                1, y_high.unsqueeze(1), ly.unsqueeze(1))
            wx = image.new_zeros((len(x_low), width)).scatter_add(
                1, x_low.unsqueeze(1), hx.unsqueeze(1)).scatter_add(
                1, x_high.unsqueeze(1), lx.unsqueeze(1))
            samples = torch.einsum("yh,chw,xw->cyx", wy, image, wx)
            pooled = samples.reshape(-1, output_height, grid_h, output_width, grid_w)
            results.append(pooled.sum((2, 4)) / count)
        else:
            rows_low, rows_high = image[:, y_low], image[:, y_high]
            corners = torch.stack([
                hy[:, None] * hx[None, :] * rows_low[:, :, x_low],
                hy[:, None] * lx[None, :] * rows_low[:, :, x_high],
                ly[:, None] * hx[None, :] * rows_high[:, :, x_low],
                ly[:, None] * lx[None, :] * rows_high[:, :, x_high]]).amax(0)
            pooled = corners.reshape(-1, output_height, grid_h, output_width, grid_w)
            results.append(pooled.amax(4).amax(2))
    if not results:
        return x.new_zeros((0, x.shape[1], output_height, output_width))
    return torch.stack(results)


class DetectionOps:
    """``visit_<op>`` of the detection family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_roialign(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__RoiAlign.html (opset 10, which lacks
        coordinate_transformation_mode, worked as 'output_half_pixel')."""
        a = op.attributes
        mode = text(a.get("mode"), "avg")
        coordinates = text(a.get("coordinate_transformation_mode"), "output_half_pixel")
        if mode not in ("avg", "max") or coordinates not in ("half_pixel",
                                                             "output_half_pixel"):
            raise self.node_error(op, f"mode {mode!r} / coordinate_transformation_mode "
                                  f"{coordinates!r} are not avg/max and half_pixel/"
                                  f"output_half_pixel")
        options = dict(mode=mode, output_height=int(a.get("output_height") or 1),
                       output_width=int(a.get("output_width") or 1),
                       sampling_ratio=int(a.get("sampling_ratio") or 0),
                       spatial_scale=1.0 if a.get("spatial_scale") is None
                       else float(a["spatial_scale"]),
                       half_pixel=coordinates == "half_pixel")
        self._emit(op, lambda x, rois, indices: roi_align(x, rois, indices, **options))

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


__all__ = ["DetectionOps"]
