"""The reference framework (``d5ref``): slow, readable NumPy implementations that every
framework's version is validated against."""
from deep500.frameworks.reference.operators import (ReferenceOp, create_operator,
                                                    get_operator_class, operator_names,
                                                    register)

__all__ = ["ReferenceOp", "create_operator", "get_operator_class", "operator_names",
           "register"]
