"""TensorFlowVisitor: the detection family (``deep500/frameworks/families.py``),
object-detection operators: https://onnx.ai/onnx/operators/onnx__NonMaxSuppression.html,
.../onnx__RoiAlign.html. NonMaxSuppression runs TensorFlow's per batch and class;
RoiAlign's sampling grids are computed per region when the closure runs.
"""
from __future__ import annotations

import math

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr, _text
from deep500.frameworks.tensorflow.ops._values import _ints, _static, _tf_dtype


class DetectionOps:
    """``visit_<op>`` of the detection family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_nonmaxsuppression(self, op, network) -> None:
        """NonMaxSuppression: per batch and class, greedily the highest-scoring boxes whose
        IoU with every selected one is at most iou_threshold, scores above
        score_threshold (https://onnx.ai/onnx/operators/onnx__NonMaxSuppression.html)."""
        center = bool(_attr(op, "center_point_box", 0))
        inputs = [self.key(op.inputs[0]), self.key(op.inputs[1])]
        inputs += [self.static_key(n) for n in op.inputs[2:3]]
        inputs += [self.key(n) for n in op.inputs[3:5]]
        dynamic_error = self._dynamic_error(op, "max_output_boxes_per_class")

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

    def visit_roialign(self, op, network) -> None:
        """RoiAlign (https://arxiv.org/abs/1703.06870): per region and output bin, the
        average (or the largest weighted corner term, in max mode) of bilinear samples
        on a regular grid (https://onnx.ai/onnx/operators/onnx__RoiAlign.html)."""
        half_pixel = _text(op.attributes.get("coordinate_transformation_mode"),
                           "half_pixel") == "half_pixel"
        use_max = _text(op.attributes.get("mode"), "avg") == "max"
        out_h, out_w = int(_attr(op, "output_height", 1)), int(_attr(op, "output_width", 1))
        ratio = int(_attr(op, "sampling_ratio", 0))
        scale = float(_attr(op, "spatial_scale", 1.0))
        offset = 0.5 if half_pixel else 0.0
        self._check_rank(op.inputs[0], 4, "RoiAlign pools (N, C, H, W) feature maps")
        inputs = [self.key(op.inputs[0]), self.static_key(op.inputs[1]),
                  self.key(op.inputs[2])]
        dynamic_error = self._dynamic_error(op, "regions (which decide the sampling grids)")

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
