"""Concat: join the inputs along ``axis`` (required; negative counts from the end).
https://onnx.ai/onnx/operators/onnx__Concat.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError


@register("Concat")
class Concat(ReferenceOp):
    # ONNX gives axis no default: it must be set.
    defaults = {"axis": None}

    def _axis(self, inputs) -> int:
        axis = self.attr("axis")
        if axis is None:
            raise Deep500Error(f"{self.op_type} needs the attribute axis")
        if not inputs:
            raise ShapeError(f"{self.op_type} needs at least one input")
        shapes = [np.shape(x) for x in inputs]
        rank = len(shapes[0])
        if not -rank <= axis < rank:
            raise ShapeError(f"{self.op_type}: axis {axis} is outside [{-rank}, {rank - 1}] "
                             f"for inputs of shape {shapes[0]}")
        axis = axis % rank
        for shape in shapes:
            if len(shape) != rank or any(a != b for i, (a, b) in enumerate(zip(shape, shapes[0]))
                                         if i != axis):
                raise ShapeError(f"{self.op_type}: input shapes {shapes} differ outside "
                                 f"axis {axis}")
        dtypes = {np.asarray(x).dtype for x in inputs}
        if len(dtypes) > 1:
            raise ShapeError(f"{self.op_type}: inputs must share one dtype, got "
                             f"{sorted(map(str, dtypes))}")
        return axis

    def forward(self, *inputs):
        return np.concatenate([np.asarray(x) for x in inputs], axis=self._axis(inputs))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        axis = self._axis(fwd_inputs)
        ends = np.cumsum([np.shape(x)[axis] for x in fwd_inputs])[:-1]
        return np.split(np.asarray(grads[0]), ends, axis=axis)
