"""ConcatFromSequence: the tensors of ``input_sequence`` joined along ``axis``; with
``new_axis=1`` stacked along a new axis ``axis`` (which may then be ``rank``).
https://onnx.ai/onnx/operators/onnx__ConcatFromSequence.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_elementwise import check_same_dtype
from deep500.frameworks.reference.operators._op_common_sequence import SequenceOp, sequence
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError


@register("ConcatFromSequence")
class ConcatFromSequence(SequenceOp):
    defaults = {"axis": None, "new_axis": 0}

    def forward(self, input_sequence):
        tensors = [np.asarray(x) for x in sequence(input_sequence, self.op_type)]
        if not tensors:
            raise ShapeError(f"{self.op_type}: the input sequence is empty; there is no "
                             f"tensor to join")
        check_same_dtype(self.op_type, *tensors)
        axis, stacking = self.attr("axis"), bool(self.attr("new_axis"))
        rank = tensors[0].ndim + stacking
        if axis is None or not -rank <= axis < rank:
            raise ShapeError(f"{self.op_type}: axis={axis} must be in [{-rank}, {rank - 1}] "
                             f"for tensors of rank {tensors[0].ndim}"
                             f"{' stacked' if stacking else ''}")
        try:
            return np.stack(tensors, axis) if stacking else np.concatenate(tensors, axis)
        except ValueError as exc:
            raise ShapeError(f"{self.op_type}: the tensors' shapes "
                             f"{[list(x.shape) for x in tensors]} do not join along axis "
                             f"{axis}: {exc}") from None
