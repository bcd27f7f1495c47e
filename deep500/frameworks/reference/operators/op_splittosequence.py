"""SplitToSequence: ``input`` split along ``axis`` into a sequence: into parts of the
lengths of a 1-D ``split``, into chunks of a scalar ``split`` (the last may be shorter),
or, without ``split``, into slices of length 1, whose axis is dropped where
``keepdims=0``. https://onnx.ai/onnx/operators/onnx__SplitToSequence.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_sequence import SequenceOp
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError


@register("SplitToSequence")
class SplitToSequence(SequenceOp):
    defaults = {"axis": 0, "keepdims": 1}

    def _lengths(self, split, extent: int) -> list:
        if split is None:
            return [1] * extent
        split = np.asarray(split)
        if split.ndim == 0:
            chunk = int(split)
            if chunk <= 0:
                raise ShapeError(f"{self.op_type}: split={chunk} must be positive")
            return [min(chunk, extent - start) for start in range(0, extent, chunk)]
        lengths = [int(n) for n in split]
        if sum(lengths) != extent or any(n < 0 for n in lengths):
            raise ShapeError(f"{self.op_type}: split {lengths} must be non-negative lengths "
                             f"summing to the axis' extent {extent}")
        return lengths

    def forward(self, input, split=None):
        input = np.asarray(input)
        axis = self.attr("axis")
        if not -input.ndim <= axis < input.ndim:
            raise ShapeError(f"{self.op_type}: axis={axis} is outside [{-input.ndim}, "
                             f"{input.ndim - 1}] for an input of shape {list(input.shape)}")
        lengths = self._lengths(split, input.shape[axis])
        if not lengths:
            return ([],)
        parts = np.split(input, np.cumsum(lengths)[:-1], axis=axis)
        if split is None and not self.attr("keepdims"):
            parts = [np.squeeze(part, axis=axis) for part in parts]
        return ([np.array(part, copy=True) for part in parts],)
