"""Transpose: output axis i is input axis perm[i]; perm defaults to the reversed axes.
https://onnx.ai/onnx/operators/onnx__Transpose.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Transpose")
class Transpose(ReferenceOp):
    defaults = {"perm": None}

    def _perm(self, rank: int) -> tuple:
        perm = self.attr("perm")
        if perm is None:
            return tuple(reversed(range(rank)))
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(rank)):
            raise ShapeError(f"{self.op_type}: perm {list(perm)} is not a permutation of the "
                             f"{rank} axes 0..{rank - 1} of the input")
        return perm

    def forward(self, data):
        data = np.asarray(data)
        # A copy, so that the output never aliases the input.
        return np.transpose(data, self._perm(data.ndim)).copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        perm = self._perm(np.ndim(fwd_inputs[0]))
        return [np.transpose(np.asarray(grads[0]), np.argsort(perm))]
