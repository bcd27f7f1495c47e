"""The PyTorch bridge (``d5pt``)."""
from deep500.frameworks.pytorch.native_ops import (PyTorchNativeOp, native_operator,
                                                   native_operator_names)

__all__ = ["PyTorchNativeOp", "native_operator", "native_operator_names"]
