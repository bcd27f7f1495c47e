"""CenterCropPad: crop or zero-pad the chosen axes to ``shape``, centred: a crop drops
⌊d/2⌋ elements at the start and the rest at the end (d = input - target), a pad adds
⌊d/2⌋ zeros at the start and the rest at the end (d = target - input).
https://onnx.ai/onnx/operators/onnx__CenterCropPad.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.axes import distinct_axes


@register("CenterCropPad")
class CenterCropPad(ReferenceOp):
    defaults = {"axes": None}

    def _windows(self, X, shape):
        """(output shape, index into the input, index into the output)."""
        rank = X.ndim
        shape = [int(s) for s in np.asarray(shape).ravel()]
        axes = self.attr("axes")
        axes = list(range(rank)) if axes is None else distinct_axes(
            self.op_type, axes, rank, f"an input of shape {list(X.shape)}")
        if len(shape) != len(axes):
            raise ShapeError(f"CenterCropPad: shape has {len(shape)} values; it needs one "
                             f"per axis in {axes}")
        if any(s < 0 for s in shape):
            raise ShapeError(f"CenterCropPad: shape {shape} must not be negative")
        out_shape = list(X.shape)
        source = [slice(None)] * rank
        target = [slice(None)] * rank
        for axis, size in zip(axes, shape):
            length = X.shape[axis]
            out_shape[axis] = size
            if size < length:
                start = (length - size) // 2
                source[axis] = slice(start, start + size)
            elif size > length:
                start = (size - length) // 2
                target[axis] = slice(start, start + length)
        return tuple(out_shape), tuple(source), tuple(target)

    def forward(self, input_data, shape):
        X = np.asarray(input_data)
        out_shape, source, target = self._windows(X, shape)
        Y = np.zeros(out_shape, X.dtype)
        Y[target] = X[source]
        return Y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X = np.asarray(fwd_inputs[0])
        if not np.issubdtype(X.dtype, np.floating):
            return [None, None]
        _, source, target = self._windows(X, fwd_inputs[1])
        dX = np.zeros_like(X)
        dX[source] = grads[0][target]
        return [dX, None]
