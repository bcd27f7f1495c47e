"""Reference NumPy operators, one ONNX operator per ``op_*.py`` module.

Every module in this package whose name starts with ``op_`` is imported so that its
``@register``-ed classes are in the registry; families share helpers through
``_op_common_*.py`` modules.
"""
import importlib
import pkgutil

from deep500.frameworks.reference.operators.registry import (ReferenceOp, create_operator,
                                                              get_operator_class,
                                                              operator_keys, operator_names,
                                                              register)

for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("op_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ReferenceOp", "register", "create_operator", "get_operator_class",
           "operator_keys", "operator_names"]
