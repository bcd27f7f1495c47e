"""TensorFlowVisitor methods for the attention, normalization, recurrent (LSTM, GRU, RNN),
resampling and window operators of the ONNX operator set (issue 19), mixed into
:class:`deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`. Each family lives in its
own module; each ``visit_<op>`` uses the visitor's helpers (``emit``, ``key``,
``static_key``) and follows https://onnx.ai/onnx/operators/.

Every closure is built from differentiable TensorFlow operations, so that GradientTape
differentiates through them (the recurrent operators unroll their time loop). NumPy only
computes constants known when the closure runs on static shapes (interpolation matrices,
causal masks, sampling positions).
"""
from __future__ import annotations

from deep500.frameworks.tensorflow.seq_attention import AttentionOps
from deep500.frameworks.tensorflow.seq_normalization import SequenceNormalizationOps
from deep500.frameworks.tensorflow.seq_recurrent import RecurrentOps
from deep500.frameworks.tensorflow.seq_resampling import ResamplingOps
from deep500.frameworks.tensorflow.seq_window import WindowOps


class SequenceOps(AttentionOps, SequenceNormalizationOps, RecurrentOps, ResamplingOps,
                  WindowOps):
    """Mixin of ``visit_<op>`` methods (see the module docstring). Methods that
    the visitor class defines itself take precedence over these."""
