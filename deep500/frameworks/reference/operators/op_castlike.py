"""CastLike: the first input converted to the element type of the second
(``target_type``, whose values are not used), with Cast's ``saturate`` and ``round_mode``.
https://onnx.ai/onnx/operators/onnx__CastLike.html"""
import numpy as np

from deep500.frameworks.reference.operators.op_cast import check_cast_attributes
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.onnx_interop.cast import cast_gradient, convert


@register("CastLike")
class CastLike(ReferenceOp):
    defaults = {"round_mode": "up", "saturate": 1}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        check_cast_attributes(self)

    def forward(self, input, target_type):
        return convert(input, np.asarray(target_type).dtype, self.saturate, self.round_mode)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input, target_type = (np.asarray(x) for x in fwd_inputs)
        if grads[0] is None:
            grad = cast_gradient(np.zeros(input.shape, np.float32), input.dtype,
                                 target_type.dtype)
        else:
            grad = cast_gradient(grads[0], input.dtype, target_type.dtype)
        return [grad, None]
