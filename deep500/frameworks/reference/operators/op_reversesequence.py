"""ReverseSequence: for each batch entry b (along ``batch_axis``), the first
sequence_lens[b] elements along ``time_axis`` reversed, the rest copied.
https://onnx.ai/onnx/operators/onnx__ReverseSequence.html

The operation is a permutation that is its own inverse, so the gradient is the same
operation applied to the output gradient.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("ReverseSequence")
class ReverseSequence(ReferenceOp):
    defaults = {"batch_axis": 1, "time_axis": 0}

    def _apply(self, input, sequence_lens):
        input = np.asarray(input)
        batch, time = self.attr("batch_axis"), self.attr("time_axis")
        if input.ndim < 2 or {batch, time} != {0, 1}:
            raise ShapeError(f"{self.op_type}: needs an input of rank >= 2 and batch_axis, "
                             f"time_axis 0 and 1 (in either order); got shape {input.shape}, "
                             f"batch_axis {batch}, time_axis {time}")
        lens = np.asarray(sequence_lens).reshape(-1).astype(np.int64)
        steps = input.shape[time]
        if lens.size != input.shape[batch] or np.any((lens < 0) | (lens > steps)):
            raise ShapeError(f"{self.op_type}: sequence_lens must hold one value in "
                             f"[0, {steps}] per batch entry ({input.shape[batch]}), got "
                             f"{lens.tolist()}")
        t = np.arange(steps)[:, None]                                  # (time, batch)
        source = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)
        if batch == 0:
            source = source.T
        source = source.reshape(source.shape + (1,) * (input.ndim - 2))
        return np.take_along_axis(input, np.broadcast_to(source, input.shape), axis=time)

    def forward(self, input, sequence_lens):
        return self._apply(input, sequence_lens)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = np.asarray(fwd_inputs[0])
        if grads[0] is None or not np.issubdtype(input.dtype, np.floating):
            return [np.zeros_like(input), None]
        return [self._apply(grads[0], fwd_inputs[1]), None]
