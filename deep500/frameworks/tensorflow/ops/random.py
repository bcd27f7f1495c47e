"""TensorFlowVisitor: the random family (``deep500/frameworks/families.py``), random
generators and dropout: https://onnx.ai/onnx/operators/onnx__Dropout.html. Dropout runs as
in inference (the identity, its mask all true); training mode is refused.
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._layout import ONNX_LAYOUT
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._values import _static


class RandomOps:
    """``visit_<op>`` of the random family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_dropout(self, op, network) -> None:
        """Dropout, for inference: the identity (mask output all true)."""
        unsupported = self.node_error(op, "Dropout with training_mode=true is not supported "
                                          "(the executor runs Dropout as in inference); "
                                          "remove the node or set training_mode to false")
        if len(op.inputs) > 2 and op.inputs[2]:
            value = self._value(op.inputs[2])
            if value is not None and bool(np.reshape(value, -1)[0]):
                raise unsupported
        mask = len(op.outputs) > 1 and op.outputs[1]

        def dropout(x, ratio=None, training_mode=None):
            rate = _static(ratio)
            if training_mode is not None and not (rate is not None and
                                                  float(np.reshape(rate, -1)[0]) == 0.0):
                value = _static(training_mode)
                if value is None:
                    tf.debugging.assert_equal(training_mode, False, message=str(unsupported))
                elif bool(np.reshape(value, -1)[0]):
                    raise unsupported
            if mask:
                return x, tf.ones_like(x, dtype=tf.bool)
            return x
        x = op.inputs[0]
        layout = self.layout(x) if self.propagate_layout else ONNX_LAYOUT
        inputs = [self.key(x, layout)] + [self.static_key(n) for n in op.inputs[1:]]
        if mask:
            # Both outputs share x's layout.
            keys = (self._output_key(op.outputs[0], layout, self.rank(x)),
                    self._output_key(op.outputs[1], layout, self.rank(x)))
            self._emit(dropout, inputs, keys)
        else:
            self.emit(dropout, inputs, op.outputs[0], layout, self.rank(x))
