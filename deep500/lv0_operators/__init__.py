"""Level 0: operators (``CustomOp``) and their validation (forward and gradient checks)."""
from deep500.lv0_operators.custom_op import CustomOp, CustomPythonOp
from deep500.lv0_operators.op_validation import OpTestResult, test_op_forward, test_op_gradient

__all__ = ["CustomOp", "CustomPythonOp", "OpTestResult", "test_op_forward",
           "test_op_gradient"]
