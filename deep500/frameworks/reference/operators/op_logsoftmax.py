"""LogSoftmax (opset 13): Y = X - log(sum(exp(X))) along one axis.
https://onnx.ai/onnx/operators/onnx__LogSoftmax.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_softmax import (log_softmax,
                                                                        log_softmax_backward,
                                                                        normalize_axis)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("LogSoftmax")
class LogSoftmax(ReferenceOp):
    defaults = {"axis": -1}

    def forward(self, X):
        return log_softmax(X, normalize_axis(self.op_type, self.attr("axis"), X.ndim))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        if grads[0] is None:
            return [np.zeros_like(X)]
        axis = normalize_axis(self.op_type, self.attr("axis"), X.ndim)
        return [log_softmax_backward(grads[0], fwd_outputs[0], axis)]
