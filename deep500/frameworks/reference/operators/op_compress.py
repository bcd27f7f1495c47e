"""Compress: the slices along ``axis`` (the flattened input if no axis) where the 1-D
bool ``condition`` is true; a condition shorter than the axis selects nothing beyond its
end. https://onnx.ai/onnx/operators/onnx__Compress.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import normalize_axis
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Compress")
class Compress(ReferenceOp):
    defaults = {"axis": None}

    def _selection(self, input, condition):
        """(axis, selected positions along it) with input flattened when axis is None."""
        condition = np.asarray(condition)
        if condition.ndim != 1:
            raise ShapeError(f"{self.op_type}: condition must be 1-D, got shape "
                             f"{condition.shape}")
        axis = self.attr("axis")
        extent = input.size if axis is None else \
            input.shape[normalize_axis(self.op_type, axis, input.ndim)]
        if condition.size > extent:
            raise ShapeError(f"{self.op_type}: condition has {condition.size} values but the "
                             f"selected axis only {extent}")
        return (None if axis is None else normalize_axis(self.op_type, axis, input.ndim),
                np.flatnonzero(condition.astype(bool)))

    def forward(self, input, condition):
        input = np.asarray(input)
        axis, selected = self._selection(input, condition)
        return np.take(input.reshape(-1) if axis is None else input, selected,
                       axis=0 if axis is None else axis)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = np.asarray(fwd_inputs[0])
        d_input = np.zeros_like(input)
        if grads[0] is None or not np.issubdtype(input.dtype, np.floating):
            return [d_input, None]
        axis, selected = self._selection(input, fwd_inputs[1])
        if axis is None:
            d_input.reshape(-1)[selected] = grads[0]
        else:
            d_input[(slice(None),) * axis + (selected,)] = grads[0]
        return [d_input, None]
