"""QLinearMatMul: the quantized product ``saturate(round(((a - a_zero_point) @ (b -
b_zero_point)) · a_scale · b_scale / y_scale) + y_zero_point)``, batched like
numpy.matmul (opsets 10, 21). https://onnx.ai/onnx/operators/onnx__QLinearMatMul.html

a, b and y are int8, uint8 or (opset 21) a float8 type, each with a zero point of its
type; y's type is y_zero_point's. Scales and zero points of a are scalars or per row
(an M-vector or (..., M, 1)), of b scalars or per column (an N-vector or (..., 1, N));
y's broadcast to the output. The product is exact (int64 or float64), the multiplier
computed in the scales' type, the rescaled value rounded half to even; float8 outputs
saturate. Gradients: none (quantized operator); backward returns None.
"""
from deep500.frameworks.reference.operators._op_common_integer import (QLINEAR_TYPES,
                                                                       check_type,
                                                                       column_operand,
                                                                       matmul, requantize,
                                                                       row_operand, shifted)
from deep500.frameworks.reference.operators._op_common_quantize import check_zero_point
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("QLinearMatMul")
class QLinearMatMul(ReferenceOp):
    defaults = {}

    def forward(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                y_zero_point=None):
        a = check_type(self.op_type, "a", a, QLINEAR_TYPES)
        b = check_type(self.op_type, "b", b, QLINEAR_TYPES)
        check_zero_point(self.op_type, "a_zero_point", a, a_zero_point)
        check_zero_point(self.op_type, "b_zero_point", b, b_zero_point)
        if y_zero_point is not None:
            check_type(self.op_type, "y_zero_point", y_zero_point, QLINEAR_TYPES)
        dtype = a.dtype if y_zero_point is None else y_zero_point.dtype
        a_scale = row_operand(self.op_type, "a_scale", a, a_scale)
        b_scale = column_operand(self.op_type, "b_scale", b, b_scale)
        if a_zero_point is not None:
            a_zero_point = row_operand(self.op_type, "a_zero_point", a, a_zero_point)
        if b_zero_point is not None:
            b_zero_point = column_operand(self.op_type, "b_zero_point", b, b_zero_point)
        product = matmul(self.op_type, shifted(a, a_zero_point), shifted(b, b_zero_point))
        return requantize(self.op_type, product, (a_scale, b_scale), y_scale, y_zero_point,
                          dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None] * len(fwd_inputs)
