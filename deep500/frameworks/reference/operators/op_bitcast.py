"""BitCast: the input's bits reinterpreted as the type ``to`` of the same bit width, shape
unchanged, bytes read as little endian (opset 26).
https://onnx.ai/onnx/operators/onnx__BitCast.html

Every non-string ONNX type NumPy and ml_dtypes hold is supported. The 4- and 2-bit types
(int4, uint4, FLOAT4E2M1, int2, uint2) keep one value per byte here, in its low bits:
those bits are what is reinterpreted. Gradients: none (a reinterpretation of bits is not
differentiable); backward returns None.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError

_SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2,
                  "float6_e2m3fn": 6, "float6_e3m2fn": 6}
from deep500.utils.onnx_interop.cast import is_string, target_dtype


def bit_width(dtype: np.dtype) -> int:
    return _SUB_BYTE_BITS.get(dtype.name, dtype.itemsize * 8)


@register("BitCast")
class BitCast(ReferenceOp):
    defaults = {"to": None}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        if self.attr("to") is None:
            raise Deep500Error(f"{self.op_type} needs the attribute to (the target "
                               f"TensorProto.DataType)")
        self.dtype = target_dtype(self.op_type, self.attr("to"))
        if is_string(self.dtype):
            raise UnsupportedError(f"{self.op_type}: strings have no fixed bit width; "
                                   f"to must be a numeric or bool type")

    def forward(self, input):
        input = np.asarray(input)
        if is_string(input.dtype):
            raise UnsupportedError(f"{self.op_type}: cannot reinterpret string tensors")
        bits = bit_width(input.dtype)
        if bits != bit_width(self.dtype):
            raise ShapeError(f"{self.op_type}: {input.dtype} has {bits} bits but "
                             f"to={self.dtype} has {bit_width(self.dtype)}; BitCast needs "
                             f"equal widths (use Cast to convert values)")
        little = input.astype(input.dtype.newbyteorder("<"), order="C")
        if input.dtype.name in _SUB_BYTE_BITS:
            low = little.view(np.uint8) & np.uint8((1 << bits) - 1)
            return low.view(self.dtype)
        return little.view(self.dtype.newbyteorder("<")).astype(self.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]
