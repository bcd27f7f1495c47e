"""Softmax (opset 13): Y = exp(X) / sum(exp(X)) along one axis.
https://onnx.ai/onnx/operators/onnx__Softmax.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_softmax import (normalize_axis, softmax,
                                                                        softmax_backward)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register


@register("Softmax")
class Softmax(ReferenceOp):
    defaults = {"axis": -1}

    def forward(self, X):
        return softmax(X, normalize_axis(self.op_type, self.attr("axis"), X.ndim))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        if grads[0] is None:
            return [np.zeros_like(X)]
        axis = normalize_axis(self.op_type, self.attr("axis"), X.ndim)
        return [softmax_backward(grads[0], fwd_outputs[0], axis)]
