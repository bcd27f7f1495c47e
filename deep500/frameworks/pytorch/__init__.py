"""The PyTorch bridge (``d5pt``)."""
from deep500.frameworks.pytorch.executor import (PyTorchGraphExecutor,
                                                 PyTorchNativeGraphExecutor, from_onnx)
from deep500.frameworks.pytorch.native_ops import (PyTorchNativeOp, native_operator,
                                                   native_operator_names)
from deep500.frameworks.pytorch.network import PyTorchNativeNetwork, PyTorchNetwork

__all__ = ["PyTorchGraphExecutor", "PyTorchNativeGraphExecutor", "PyTorchNativeNetwork",
           "PyTorchNativeOp", "PyTorchNetwork", "from_onnx", "native_operator",
           "native_operator_names"]
