"""TensorFlowVisitor: BatchNormalization, Softmax, LogSoftmax and Dropout.
https://onnx.ai/onnx/operators/onnx__BatchNormalization.html
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._tf_common import _like, ONNX_LAYOUT, _static


class NormalizationOps:
    """``visit_<op>`` of normalisation and regularisation, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`, whose helpers they use
    (``emit``, ``key``, ``rank``, ``layout``, ``_value``, ``_unsupported``, ...)."""

    def visit_batchnormalization(self, op, network) -> None:
        """BatchNormalization: https://onnx.ai/onnx/operators/onnx__BatchNormalization.html
        (inference: the given statistics; training_mode=1: the batch's population
        statistics, and running statistics as outputs)."""
        a = op.attributes
        eps = float(a["epsilon"])
        momentum = float(a.get("momentum") if a.get("momentum") is not None else 0.9)
        training = bool(a.get("training_mode") or 0)
        extra_outputs = [o for o in op.outputs[1:] if o]

        def inference(x, scale, b, mean, var):
            # Channels are the last axis here; tf.nn.batch_normalization broadcasts.
            return tf.nn.batch_normalization(x, _like(mean, x), _like(var, x), _like(b, x),
                                             _like(scale, x), eps)

        def train(x, scale, b, mean, var):
            batch_mean, batch_var = tf.nn.moments(x, list(range(len(x.shape) - 1)))
            y = tf.nn.batch_normalization(x, batch_mean, batch_var, _like(b, x),
                                          _like(scale, x), eps)
            running_mean = mean * momentum + _like(batch_mean, mean) * (1 - momentum)
            running_var = var * momentum + _like(batch_var, var) * (1 - momentum)
            return y, running_mean, running_var

        if training:
            self._channels_last_op(op, train, 3)
        else:
            if extra_outputs:
                raise self._unsupported("running-statistic outputs need training_mode=1")
            self._channels_last_op(op, inference)

    def _softmax(self, op, fn) -> None:
        axis = op.attributes.get("axis")
        axis = -1 if axis is None else int(axis)
        self.emit(lambda x: fn(x, axis=axis), [self.key(op.inputs[0])], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_softmax(self, op, network) -> None:
        """Softmax: https://onnx.ai/onnx/operators/onnx__Softmax.html"""
        self._softmax(op, tf.nn.softmax)

    def visit_logsoftmax(self, op, network) -> None:
        """LogSoftmax: as Softmax, in log space."""
        self._softmax(op, tf.nn.log_softmax)

    def visit_dropout(self, op, network) -> None:
        """Dropout, for inference: the identity (mask output all true)."""
        unsupported = self._unsupported("Dropout with training_mode=true is not supported "
                                        "(the executor runs Dropout as in inference)",
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

    def visit_identity(self, op, network) -> None:
        self._same_layout(op, lambda x: x)
