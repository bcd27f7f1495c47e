"""TensorFlowVisitor methods for the elementwise, cast, logical, activation, reduction and
indexing operators of the ONNX operator set (issue 19), mixed into
:class:`deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`: each ``visit_<op>`` uses the
visitor's own helpers and follows https://onnx.ai/onnx/operators/.
"""
from __future__ import annotations


class TensorOps:
    """Mixin of ``visit_<op>`` methods (see the module docstring). Methods that
    the visitor class defines itself take precedence over these."""
