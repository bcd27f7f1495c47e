"""The TensorFlow bridge (``d5tf``)."""
from deep500.frameworks.tensorflow.native_ops import (TensorFlowNativeOp, native_operator,
                                                      native_operator_names)

__all__ = ["TensorFlowNativeOp", "native_operator", "native_operator_names"]
