"""Graph transformations on ONNX models."""
from deep500.lv1_network.transformations.microbatch import microbatch_convolutions

__all__ = ["microbatch_convolutions"]
