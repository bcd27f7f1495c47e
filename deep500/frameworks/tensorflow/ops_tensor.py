"""TensorFlowVisitor methods for the ONNX operators of issue 19 beyond the visitor's own
families, mixed into :class:`deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`, one
family per module: elementwise math, activations, logic and bits (``tensor_math``),
reductions, TopK and cumulative sums (``tensor_reduce``), indexing and scattering
(``tensor_index``), quantization (``tensor_quantize``), windows and spectra
(``tensor_signal``), detection (``tensor_detection``), ai.onnx.ml and TfIdfVectorizer
(``tensor_ml``) and the preview training optimizers (``tensor_training``). Each
``visit_<op>`` follows https://onnx.ai/onnx/operators/.

Every closure is built from differentiable TensorFlow operations, so that gradients flow
through ``tf.GradientTape``; NumPy only reads constants known at build time. Operators
whose operands TensorFlow has no kernel for (8- and 16-bit integers in ``truncatemod``,
float16 in ``det``) compute in a wider type and cast back.
"""
from __future__ import annotations

from deep500.frameworks.tensorflow.tensor_math import MathOps
from deep500.frameworks.tensorflow.tensor_reduce import ReductionOps
from deep500.frameworks.tensorflow.tensor_index import IndexingOps
from deep500.frameworks.tensorflow.tensor_quantize import QuantizationOps
from deep500.frameworks.tensorflow.tensor_signal import SignalOps
from deep500.frameworks.tensorflow.tensor_detection import DetectionOps
from deep500.frameworks.tensorflow.tensor_ml import MachineLearningOps
from deep500.frameworks.tensorflow.tensor_training import TrainingOps


class TensorOps(MathOps, ReductionOps, IndexingOps, QuantizationOps, SignalOps, DetectionOps,
                MachineLearningOps, TrainingOps):
    """Mixin of ``visit_<op>`` methods (see the module docstring), one family per
    ``tensor_*`` module. Methods that the visitor class defines itself take precedence
    over these."""
