"""Cast: the input converted to the element type ``to`` (a TensorProto.DataType; before
opset 6 its name, e.g. "FLOAT"). https://onnx.ai/onnx/operators/onnx__Cast.html

Only NumPy's own types are supported (bool, integers, float16/32/64); ``saturate`` and
``round_mode`` only affect float8 targets, which are not.
"""
import numpy as np
import onnx
from onnx import helper

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, UnsupportedError


def target_dtype(to) -> np.dtype:
    """The NumPy dtype of ONNX element type ``to`` (enum value or name)."""
    if isinstance(to, str):
        try:
            to = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise Deep500Error(f"Cast: to={to!r} is not an ONNX element type") from None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(to)))
    except (KeyError, TypeError, ValueError):
        raise Deep500Error(f"Cast: to={to!r} is not an ONNX element type") from None
    if dtype.kind not in "biuf" or dtype.type.__module__ != "numpy":
        name = onnx.TensorProto.DataType.Name(int(to))
        raise UnsupportedError(f"Cast: the reference framework cannot cast to {name}; it "
                               f"supports bool, integer and float16/32/64 targets")
    return dtype


@register("Cast")
class Cast(ReferenceOp):
    defaults = {"round_mode": "up", "saturate": 1, "to": None}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        if self.attr("to") is None:
            raise Deep500Error(f"{self.op_type} needs the attribute to")
        self.dtype = target_dtype(self.attr("to"))

    def forward(self, input):
        return np.asarray(input).astype(self.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (input,) = fwd_inputs
        if not (np.issubdtype(input.dtype, np.floating)
                and np.issubdtype(self.dtype, np.floating)):
            return [None]
        if grads[0] is None:
            return [np.zeros_like(input)]
        return [np.asarray(grads[0]).astype(input.dtype)]
