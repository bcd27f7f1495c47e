"""The TensorFlow bridge (``d5tf``): native operators and custom (C++ or Python) operators
as differentiable TensorFlow functions (level 0), and graph executors
for ONNX models and Keras models (level 1), Keras optimizers behind Deep500's optimizer
interface (level 2)."""
from deep500.frameworks.tensorflow.custom_ops import (TensorFlowCustomOp, TensorFlowFunctionOp,
                                                      custom_op, custom_op_from_native,
                                                      test_nativeop_forward,
                                                      test_nativeop_gradient)
from deep500.frameworks.tensorflow.executor import (TensorFlowGraphExecutor,
                                                    TensorFlowNativeGraphExecutor, from_onnx)
from deep500.frameworks.tensorflow.native_ops import (TensorFlowNativeOp, native_operator,
                                                      native_operator_names)
from deep500.frameworks.tensorflow.network import KerasNetwork, TensorFlowNetwork
from deep500.frameworks.tensorflow.optimizers import (AdaGradOptimizer, AdamOptimizer,
                                                      GradientDescent, KerasOptimizer,
                                                      MomentumOptimizer, RMSPropOptimizer)
from deep500.frameworks.tensorflow.visitor import TensorFlowVisitor

__all__ = ["AdaGradOptimizer", "AdamOptimizer", "GradientDescent", "KerasOptimizer",
           "MomentumOptimizer", "RMSPropOptimizer", "KerasNetwork", "TensorFlowGraphExecutor", "TensorFlowNativeGraphExecutor",
           "TensorFlowCustomOp", "TensorFlowFunctionOp", "TensorFlowNativeOp",
           "TensorFlowNetwork", "TensorFlowVisitor", "custom_op", "custom_op_from_native",
           "from_onnx", "native_operator", "native_operator_names", "test_nativeop_forward",
           "test_nativeop_gradient"]
