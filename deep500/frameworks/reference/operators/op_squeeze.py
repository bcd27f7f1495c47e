"""Squeeze (opset 13): remove the size-1 dimensions named by the optional int64 ``axes``
input (negative ones count from the end), or all size-1 dimensions without it.
https://onnx.ai/onnx/operators/onnx__Squeeze.html"""
from deep500.frameworks.reference.operators._op_common_reshape import ShapeChange
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.axes import distinct_axes


@register("Squeeze")
class Squeeze(ShapeChange):
    def output_shape(self, shape: tuple, axes=None) -> tuple:
        if axes is None:
            return tuple(d for d in shape if d != 1)
        removed = set(distinct_axes(self.op_type, axes, len(shape),
                                    f"an input of shape {tuple(shape)}"))
        wrong = [a for a in sorted(removed) if shape[a] != 1]
        if wrong:
            raise ShapeError(f"{self.op_type}: axes {wrong} of the input of shape "
                             f"{tuple(shape)} do not have size 1 and cannot be removed")
        return tuple(d for i, d in enumerate(shape) if i not in removed)
