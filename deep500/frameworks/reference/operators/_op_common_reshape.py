"""Shared by operators that only change a tensor's shape (Reshape, Squeeze, Unsqueeze):
the data is copied into the new shape, and the gradient is reshaped back."""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp


class ShapeChange(ReferenceOp):
    """Subclasses define ``output_shape(input_shape, *shape_inputs)``."""

    def output_shape(self, shape: tuple, *shape_inputs) -> tuple:
        raise NotImplementedError

    def forward(self, data, *shape_inputs):
        data = np.asarray(data)
        # A copy, so that the output never aliases the input.
        return data.reshape(self.output_shape(data.shape, *shape_inputs)).copy()

    def forward_inplace(self, data, *shape_inputs):
        """``forward`` without the copy: a view of ``data``, which the caller no longer
        needs (see ``ReferenceGraphExecutor``: it passes only arrays nothing else refers
        to), so nothing else can see the sharing."""
        data = np.asarray(data)
        return data.reshape(self.output_shape(data.shape, *shape_inputs))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data = fwd_inputs[0]
        d_data = (np.zeros_like(data) if grads[0] is None
                  else np.asarray(grads[0]).reshape(np.shape(data)))
        return [d_data] + [None] * (len(fwd_inputs) - 1)
