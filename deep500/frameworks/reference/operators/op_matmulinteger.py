"""MatMulInteger: ``(A - a_zero_point) @ (B - b_zero_point)`` of int8/uint8 matrices as
int32, batched like numpy.matmul (opset 10).
https://onnx.ai/onnx/operators/onnx__MatMulInteger.html

Zero points are scalars, per row of A (an M-vector or (..., M, 1)) and per column of B
(an N-vector or (..., 1, N)). Products are exact; the int32 accumulation wraps.
Gradients: none (integer operator); backward returns None.
"""
from deep500.frameworks.reference.operators._op_common_integer import (check_type,
                                                                       column_operand,
                                                                       matmul, row_operand,
                                                                       shifted, wrap_int32)
from deep500.frameworks.reference.operators._op_common_quantize import check_zero_point
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("MatMulInteger")
class MatMulInteger(ReferenceOp):
    defaults = {}

    def forward(self, A, B, a_zero_point=None, b_zero_point=None):
        A, B = check_type(self.op_type, "A", A), check_type(self.op_type, "B", B)
        check_zero_point(self.op_type, "a_zero_point", A, a_zero_point)
        check_zero_point(self.op_type, "b_zero_point", B, b_zero_point)
        if a_zero_point is not None:
            a_zero_point = row_operand(self.op_type, "a_zero_point", A, a_zero_point)
        if b_zero_point is not None:
            b_zero_point = column_operand(self.op_type, "b_zero_point", B, b_zero_point)
        return wrap_int32(matmul(self.op_type, shifted(A, a_zero_point),
                                 shifted(B, b_zero_point)))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None] * len(fwd_inputs)
