"""The PyTorch bridge (``d5pt``)."""
from deep500.frameworks.pytorch.custom_ops import (CustomOpFunction, PyTorchCppOp,
                                                   PyTorchCustomOp, PyTorchNativeModule,
                                                   PyTorchPythonOp, custom_op,
                                                   custom_op_from_native,
                                                   test_nativeop_forward,
                                                   test_nativeop_gradient)
from deep500.frameworks.pytorch.distributed import (PyTorchDistributedDataParallel,
                                                    init_torch_distributed)
from deep500.frameworks.pytorch.executor import (PyTorchGraphExecutor,
                                                 PyTorchNativeGraphExecutor, from_onnx)
from deep500.frameworks.pytorch.native_ops import (PyTorchNativeOp, native_operator,
                                                   native_operator_names)
from deep500.frameworks.pytorch.network import PyTorchNativeNetwork, PyTorchNetwork
from deep500.frameworks.pytorch.optimizers import (AdaGradOptimizer, AdamOptimizer,
                                                   GradientDescent, MomentumOptimizer,
                                                   RMSPropOptimizer, TorchOptimizer)

__all__ = ["CustomOpFunction", "PyTorchCppOp", "PyTorchCustomOp", "PyTorchNativeModule",
           "PyTorchPythonOp", "custom_op", "custom_op_from_native", "test_nativeop_forward",
           "test_nativeop_gradient", "AdaGradOptimizer", "AdamOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer", "TorchOptimizer", "PyTorchGraphExecutor", "PyTorchNativeGraphExecutor", "PyTorchNativeNetwork",
           "PyTorchNativeOp", "PyTorchNetwork", "from_onnx", "native_operator",
           "native_operator_names", "PyTorchDistributedDataParallel",
           "init_torch_distributed"]
