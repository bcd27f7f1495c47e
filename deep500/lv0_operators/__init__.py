"""Level 0: operators (``CustomOp``), C++ operators built through CMake
(``compile_custom_cppop``, ``CustomCPPOp``), and their validation (forward and gradient
checks)."""
from deep500.lv0_operators.cpp_compiler import (CppOpDescriptor, compile_custom_cppop,
                                                load_custom_cppop)
from deep500.lv0_operators.cpp_library import CppOperatorError
from deep500.lv0_operators.cpp_op import CustomCPPOp
from deep500.lv0_operators.custom_op import CustomOp, CustomPythonOp
from deep500.lv0_operators.op_validation import OpTestResult, test_op_forward, test_op_gradient
from deep500.lv0_operators.toolchain import ToolchainError

__all__ = ["CppOpDescriptor", "CppOperatorError", "CustomCPPOp", "CustomOp", "CustomPythonOp",
           "OpTestResult", "ToolchainError", "compile_custom_cppop", "load_custom_cppop",
           "test_op_forward", "test_op_gradient"]
