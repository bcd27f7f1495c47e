"""NonMaxSuppression (opset 11): per batch and class, greedily select boxes in order of
decreasing score (ties: the lower box index first), skipping every box whose IoU with an
already selected box exceeds ``iou_threshold``, up to ``max_output_boxes_per_class``
(default 0: none) boxes with score > ``score_threshold`` (when given).
https://onnx.ai/onnx/operators/onnx__NonMaxSuppression.html

boxes (B, N, 4) are [y1, x1, y2, x2] with either diagonal pair (center_point_box=0) or
[x_center, y_center, width, height] (center_point_box=1); scores are (B, C, N). The output
(num_selected, 3) lists [batch, class, box] in batch, class, selection order. Boxes that
do not overlap, or have no area, never suppress one another. The output is a set of
integer indices: no input has a gradient.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


def _extent(boxes: np.ndarray, center_point_box: int):
    """(y_min, x_min, y_max, x_max) of boxes (N, 4), each (N,)."""
    if center_point_box:
        x, y, w, h = (boxes[:, i] for i in range(4))
        return y - h / 2, x - w / 2, y + h / 2, x + w / 2
    return (np.minimum(boxes[:, 0], boxes[:, 2]), np.minimum(boxes[:, 1], boxes[:, 3]),
            np.maximum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 1], boxes[:, 3]))


def suppresses(boxes: np.ndarray, center_point_box: int, iou_threshold) -> np.ndarray:
    """(N, N) boolean: box i and box j overlap with IoU > iou_threshold."""
    y0, x0, y1, x1 = _extent(boxes, center_point_box)
    inter_h = np.minimum(y1[:, None], y1[None]) - np.maximum(y0[:, None], y0[None])
    inter_w = np.minimum(x1[:, None], x1[None]) - np.maximum(x0[:, None], x0[None])
    area = (x1 - x0) * (y1 - y0)
    inter = inter_w * inter_h
    union = area[:, None] + area[None] - inter
    overlap = (inter_w > 0) & (inter_h > 0) & (area[:, None] > 0) & (area[None] > 0) & (
        union > 0)
    with np.errstate(all="ignore"):
        return overlap & (inter / np.where(overlap, union, 1) > iou_threshold)


@register("NonMaxSuppression")
class NonMaxSuppression(ReferenceOp):
    defaults = {"center_point_box": 0}

    def _scalar(self, value, name: str, default):
        if value is None or np.size(value) == 0:
            return default
        value = np.asarray(value).reshape(-1)
        if value.size != 1:
            raise ShapeError(f"{self.op_type}: {name} must be one value, got shape "
                             f"{value.shape}")
        return value[0]

    def forward(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                score_threshold=None):
        boxes, scores = np.asarray(boxes), np.asarray(scores)
        if boxes.ndim != 3 or boxes.shape[2] != 4:
            raise ShapeError(f"{self.op_type}: boxes must be (batches, boxes, 4), got shape "
                             f"{boxes.shape}")
        if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or \
                scores.shape[2] != boxes.shape[1]:
            raise ShapeError(f"{self.op_type}: scores must be (batches, classes, boxes) = "
                             f"({boxes.shape[0]}, C, {boxes.shape[1]}), got shape "
                             f"{scores.shape}")
        if self.attr("center_point_box") not in (0, 1):
            raise ShapeError(f"{self.op_type}: center_point_box must be 0 or 1, got "
                             f"{self.attr('center_point_box')}")
        limit = max(int(self._scalar(max_output_boxes_per_class, "max_output_boxes_per_class",
                                     0)), 0)
        iou = self._scalar(iou_threshold, "iou_threshold", boxes.dtype.type(0))
        floor = self._scalar(score_threshold, "score_threshold", None)
        selected = []
        for b in range(boxes.shape[0]):
            suppress = suppresses(boxes[b], self.attr("center_point_box"), iou)
            for c in range(scores.shape[1]):
                score = scores[b, c]
                order = np.lexsort((np.arange(score.size), -score))
                if floor is not None:
                    order = order[score[order] > floor]
                kept = []
                for box in order:
                    if len(kept) >= limit:
                        break
                    if not suppress[box, kept].any():
                        kept.append(box)
                selected += [(b, c, box) for box in kept]
        return np.array(selected, np.int64).reshape(-1, 3)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None] * len(fwd_inputs)
