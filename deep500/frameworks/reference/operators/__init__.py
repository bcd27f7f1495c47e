"""Reference NumPy operators, one ONNX operator per ``op_*.py`` module.

An ``op_*.py`` module is imported when its operator is first asked for (the registry
finds it in ``operator_modules``); families share helpers through ``_op_common_*.py``
modules.
"""
from deep500.frameworks.reference.operators.registry import (ReferenceOp, create_operator,
                                                              get_operator_class,
                                                              operator_keys, operator_names,
                                                              register)

__all__ = ["ReferenceOp", "register", "create_operator", "get_operator_class",
           "operator_keys", "operator_names"]
