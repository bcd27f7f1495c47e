"""Mod: the remainder of A / B with multidirectional broadcasting. With fmod=0 (the
default) it is A - floor(A/B)·B, with the sign of B (Python's %); with fmod=1 it is
A - trunc(A/B)·B, with the sign of A (C's fmod). https://onnx.ai/onnx/operators/onnx__Mod.html

Integer division by zero has no defined result in ONNX; here it gives 0, as NumPy does.
The gradient (float inputs) is dA = dC, dB = -dC·q with q = floor(A/B) or trunc(A/B),
exact wherever the quotient does not jump.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import compute_dtype
from deep500.frameworks.reference.operators._op_common_elementwise import (
    BinaryElementwise, check_kind, is_floating)
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error


@register("Mod")
class Mod(BinaryElementwise):
    defaults = {"fmod": 0}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        if self.attr("fmod") not in (0, 1):
            raise Deep500Error(f"Mod: fmod must be 0 or 1, got {self.attr('fmod')!r}")

    def _forward(self, A, B):
        check_kind(self.op_type, "fiu", A, B)
        work = compute_dtype(A.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            remainder = (np.fmod if self.attr("fmod") else np.mod)(
                A.astype(work, copy=False), B.astype(work, copy=False))
        return np.asarray(remainder).astype(A.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if not is_floating(np.asarray(fwd_inputs[0]).dtype):
            return [None, None]
        return super().backward(grads, fwd_inputs, fwd_outputs)

    def _backward(self, dC, A, B, C):
        work = compute_dtype(A.dtype)
        A, B = A.astype(work, copy=False), B.astype(work, copy=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            quotient = (np.trunc if self.attr("fmod") else np.floor)(A / B)
        return dC, -dC * quotient
