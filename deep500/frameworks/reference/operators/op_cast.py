"""Cast: the input converted to the element type ``to`` (a TensorProto.DataType; before
opset 6 its name, e.g. "FLOAT"), with ``saturate`` (float8 targets) and ``round_mode``
(FLOAT8E8M0). https://onnx.ai/onnx/operators/onnx__Cast.html

The conversion rules are in ``deep500/utils/onnx_interop/cast.py``. Float-to-float casts
pass the gradient back converted to the input's type; other casts have none.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error
from deep500.utils.onnx_interop.cast import (ROUND_MODES, cast_gradient, convert,
                                             target_dtype)


def check_cast_attributes(op: ReferenceOp) -> None:
    round_mode = op.attr("round_mode")
    round_mode = round_mode.decode() if isinstance(round_mode, bytes) else round_mode
    if round_mode not in ROUND_MODES:
        raise Deep500Error(f"{op.op_type}: round_mode must be one of {ROUND_MODES}, got "
                           f"{round_mode!r}")
    if op.attr("saturate") not in (0, 1, True, False):
        raise Deep500Error(f"{op.op_type}: saturate must be 0 or 1, got "
                           f"{op.attr('saturate')!r}")
    op.round_mode, op.saturate = round_mode, bool(op.attr("saturate"))


@register("Cast")
class Cast(ReferenceOp):
    defaults = {"round_mode": "up", "saturate": 1, "to": None}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        if self.attr("to") is None:
            raise Deep500Error(f"{self.op_type} needs the attribute to (the target "
                               f"TensorProto.DataType)")
        check_cast_attributes(self)
        self.dtype = target_dtype(self.op_type, self.attr("to"))

    def forward(self, input):
        return convert(input, self.dtype, self.saturate, self.round_mode)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = np.asarray(fwd_inputs[0])
        grad = np.zeros(input.shape, np.float32) if grads[0] is None else grads[0]
        return [cast_gradient(grad, input.dtype, self.dtype)]
