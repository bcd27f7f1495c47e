"""``d5ref.custom_op``: an operator written once (C++ or Python) as a CustomOp on NumPy
arrays, the form the reference executor and the Level-0 checks use."""
from __future__ import annotations

from deep500.lv0_operators.cpp_compiler import CppOpDescriptor
from deep500.lv0_operators.cpp_op import CustomCPPOp
from deep500.lv0_operators.custom_op import CustomOp
from deep500.utils.errors import Deep500Error


def custom_op(op) -> CustomOp:
    """A CustomOp for ``op``: a CppOpDescriptor (from ``d5.compile_custom_cppop`` or
    ``d5.load_custom_cppop``) is loaded into a CustomCPPOp; a Python CustomOp is returned
    as it is."""
    if isinstance(op, CppOpDescriptor):
        return CustomCPPOp(op)
    if isinstance(op, CustomOp):
        return op
    raise Deep500Error(f"d5ref.custom_op takes a CppOpDescriptor (d5.compile_custom_cppop) "
                       f"or a d5.CustomOp, got {type(op).__name__}")
