"""LogSoftmax (opset 13): Y = X - log(sum(exp(X))) along one axis;
dX = dY - exp(Y)·Σ dY. https://onnx.ai/onnx/operators/onnx__LogSoftmax.html"""
from deep500.frameworks.reference.operators._op_common_softmax import (AlongAxis,
                                                                        log_softmax,
                                                                        log_softmax_backward)
from deep500.frameworks.reference.operators.registry import register


@register("LogSoftmax")
class LogSoftmax(AlongAxis):
    function, gradient = staticmethod(log_softmax), staticmethod(log_softmax_backward)
